package fleet

import "testing"

// TestRecent: a key noted in one period is seen in it and in the next, not
// after; a shift of two periods or more forgets all; at most max keys are
// noted per period; forget drops a key.
func TestRecent(t *testing.T) {
	r := newRecent()
	a, b, c := nsKey{"", "a"}, nsKey{"", "b"}, nsKey{"ns", "a"}
	if r.seen(a, 2) {
		t.Fatal("a seen before it was asked for")
	}
	if !r.seen(a, 2) || r.seen(c, 2) {
		t.Fatal("a not seen after it was asked for, or its namespace ignored")
	}
	if r.seen(b, 2) || r.seen(b, 2) {
		t.Fatal("b noted past max 2 keys (a and c are noted)")
	}
	r.shift(1)
	if !r.seen(a, 2) {
		t.Fatal("a not seen in the next period")
	}
	r.shift(1)
	if !r.seen(a, 2) { // noted again in the period before
		t.Fatal("a, asked for in the period before, not seen")
	}
	r.shift(2)
	if r.seen(a, 2) {
		t.Fatal("a seen two periods after it was last asked for")
	}
	r.forget(a)
	if r.seen(a, 2) {
		t.Fatal("a seen after forget")
	}
	r.shift(0) // no period passed
	if !r.seen(a, 2) {
		t.Fatal("a not seen after shift(0)")
	}
}
