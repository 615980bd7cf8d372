package deferq

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParseID: any string is either refused as ErrBadID, with a bounded
// message, or is 12 hex digits, '-', 20 hex digits, and its tag is the
// first part.
func FuzzParseID(f *testing.F) {
	for _, s := range []string{"", "-", "0123456789ab-0123456789abcdef0123", Tag("orders") + "-" + strings.Repeat("f", 20),
		"0123456789AB-0123456789abcdef0123", "0123456789ab-0123456789abcdef012", "0123456789ab_0123456789abcdef0123",
		"../../etc/passwd", "0123456789ab-0123456789abcdef0123-", strings.Repeat("a", 10000)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		tag, err := parseID(id)
		if err != nil {
			if !errors.Is(err, ErrBadID) || len(err.Error()) > 300 {
				t.Fatalf("parseID(%q): %v", id, err)
			}
			return
		}
		if len(id) != 33 || id[12] != '-' || tag != id[:12] || !isHex(id[:12]) || !isHex(id[13:]) {
			t.Fatalf("parseID(%q) accepted it with tag %q", id, tag)
		}
	})
}

func TestInsertOrdered(t *testing.T) {
	var l []*entry
	for _, sid := range []string{"1700000000002-0", "1700000000000-1", "999999999999-5", "1700000000000-10", "1700000000000-2"} {
		l = insertOrdered(l, &entry{sid: sid})
	}
	var got []string
	for _, e := range l {
		got = append(got, e.sid)
	}
	want := "999999999999-5 1700000000000-1 1700000000000-2 1700000000000-10 1700000000002-0"
	if strings.Join(got, " ") != want {
		t.Fatalf("order %v, want %s", got, want)
	}
}
