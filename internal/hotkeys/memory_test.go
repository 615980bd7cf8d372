package hotkeys

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLongKeysKeptInBoundedBuffers: a Summary's memory is fixed by its
// stripes, capacity and MaxKeyBytes, whatever keys it sees: after 100,000
// distinct keys of 4 KB every entry holds its key's text (at most
// MaxKeyBytes, "…" and a digest: 531 bytes) in a buffer of that size's
// class, 576 bytes. The text was built by appending character by
// character, which grew the buffer by doubling: 1.8× the memory for
// every long key.
func TestLongKeysKeptInBoundedBuffers(t *testing.T) {
	pad := strings.Repeat("é", 2048)
	s := New(Options{Stripes: 4, Sample: 1})
	for i := range 100_000 {
		s.Observe(pad+strconv.Itoa(i), 1, t0.Add(time.Duration(i)*time.Microsecond))
	}
	n := 0
	for i := range s.loaded() {
		for _, e := range s.loaded()[i].entries {
			n++
			if len(e.key) > DefaultMaxKeyBytes+keyText || cap(e.key) > 576 {
				t.Fatalf("an entry holds %d bytes of key in a buffer of %d; want at most %d in at most 576", len(e.key), cap(e.key), DefaultMaxKeyBytes+keyText)
			}
		}
	}
	if n != 4*DefaultCapacity {
		t.Fatalf("%d entries, want %d (4 full stripes)", n, 4*DefaultCapacity)
	}
}
