package server

import (
	"testing"
)

// TestUnreadBudget: the budget counts the answers waiting on each
// connection, lists the connections by how long they have left answers
// waiting on end (one that left none goes last when it leaves some
// again), and, past its bound, gives up those listed first until the
// rest are within it, counting them no more.
func TestUnreadBudget(t *testing.T) {
	b := newUnreadBudget(500)
	a, c, d := &unreadConn{}, &unreadConn{}, &unreadConn{}
	names := map[*unreadConn]string{a: "a", c: "c", d: "d"}
	check := func(step string, closing []*unreadConn, want string, total int64, list string) {
		t.Helper()
		var got, order string
		for _, v := range closing {
			got += names[v]
		}
		for v := b.head; v != nil; v = v.entry.next {
			order += names[v]
		}
		if got != want || b.total != total || order != list {
			t.Fatalf("after %s: closing %q, total %d, list %q; want %q, %d, %q", step, got, b.total, order, want, total, list)
		}
	}
	check("a at 300", b.update(a, 300, 0), "", 300, "a")
	check("c at 150", b.update(c, 150, 0), "", 450, "ac")
	check("a at 250", b.update(a, 250, 0), "", 400, "ac")
	check("a at 0", b.update(a, 0, 0), "", 150, "c")
	check("a at 260", b.update(a, 260, 0), "", 410, "ca")
	check("d at 200", b.update(d, 200, 0), "c", 460, "ad")
	check("c again", b.update(c, 400, 0), "", 460, "ad")
	check("d at 0", b.update(d, 0, 0), "", 260, "a")
	check("d at 600", b.update(d, 600, 0), "ad", 0, "")
	for _, v := range []*unreadConn{a, c, d} {
		if !v.entry.evicted || v.entry.listed || v.entry.charged != 0 {
			t.Errorf("%s: %+v, want evicted, unlisted, nothing counted", names[v], v.entry)
		}
	}
}
