package memstore

import (
	"strconv"
	"strings"
	"testing"
)

// TestNSHashCache: the namespace cache answers nsMix of the bytes, whether
// the string is the one cached, a copy of it, or another namespace landing
// in a filled cell.
func TestNSHashCache(t *testing.T) {
	s := New(Options{})
	var kept []string
	for i := range 500 {
		ns := strings.Repeat("n", i%9) + "|token_bucket," + strconv.Itoa(i) + "/s|"
		kept = append(kept, ns)
		for _, x := range []string{ns, strings.Clone(ns), ns} {
			if got, want := s.nsHash(x), nsMix(ns); got != want {
				t.Fatalf("nsHash(%q) = %x, want nsMix %x", x, got, want)
			}
		}
	}
	for _, ns := range kept { // cached or not, still right later
		if got, want := s.nsHash(ns), nsMix(ns); got != want {
			t.Fatalf("nsHash(%q) = %x later, want %x", ns, got, want)
		}
	}
}
