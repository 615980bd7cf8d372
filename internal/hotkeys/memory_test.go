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
// every long key. A key of MaxKeyBytes that is not UTF-8 is kept as its
// bytes (shards: auto shares it so), in a buffer of 512 bytes: less than
// its text took.
func TestLongKeysKeptInBoundedBuffers(t *testing.T) {
	for _, c := range []struct {
		name    string
		pad     string
		maxCap  int
		maxKept int
	}{
		{"4 KB", strings.Repeat("é", 2048), 576, DefaultMaxKeyBytes + keyText},
		{"512 bytes not UTF-8", strings.Repeat("\xff", DefaultMaxKeyBytes-6), 512, DefaultMaxKeyBytes},
	} {
		s := New(Options{Stripes: 4, Sample: 1})
		for i := range 100_000 {
			s.Observe(c.pad+strconv.Itoa(100_000+i), 1, t0.Add(time.Duration(i)*time.Microsecond))
		}
		n := 0
		for i := range s.loaded() {
			for _, e := range s.loaded()[i].entries {
				n++
				if len(e.key) > c.maxKept || cap(e.key) > c.maxCap {
					t.Fatalf("%s: an entry holds %d bytes of key in a buffer of %d; want at most %d in at most %d", c.name, len(e.key), cap(e.key), c.maxKept, c.maxCap)
				}
			}
		}
		if n != 4*DefaultCapacity {
			t.Fatalf("%s: %d entries, want %d (4 full stripes)", c.name, n, 4*DefaultCapacity)
		}
	}
}
