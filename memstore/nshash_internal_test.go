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
			if got, want := first(s.nsOf(x)), nsMix(ns); got != want {
				t.Fatalf("nsOf(%q) = %x, want nsMix %x", x, got, want)
			}
		}
	}
	for _, ns := range kept { // cached or not, still right later
		if got, want := first(s.nsOf(ns)), nsMix(ns); got != want {
			t.Fatalf("nsOf(%q) = %x later, want %x", ns, got, want)
		}
	}
}

func first(m uint64, _ string) uint64 { return m }

// TestInternedNamespaces: a Limiter's namespace is kept with each key as a
// 4-byte number, the same for every copy of its text and different for
// every other namespace; short, long and (past maxInterned) late
// namespaces as their text; and keys of all of them stay apart.
func TestInternedNamespaces(t *testing.T) {
	s := New(Options{})
	ns := "api|token_bucket,100/m,burst=200|"
	_, a := s.nsOf(ns)
	if len(a) != 4 {
		t.Fatalf("stored form of %q: %q, want 4 bytes", ns, a)
	}
	if _, b := s.nsOf(strings.Clone(ns)); b != a {
		t.Fatalf("a copy of %q is stored as %q, the original as %q", ns, b, a)
	}
	if _, c := s.nsOf("web|token_bucket,100/m,burst=200|"); c == a {
		t.Fatalf("two namespaces share the stored form %q", a)
	}
	for _, short := range []string{"a|", "abcd"} {
		if _, st := s.nsOf(short); st != short {
			t.Errorf("short namespace %q stored as %q, want its text", short, st)
		}
	}
	long := strings.Repeat("x", maxInternLen+1)
	if _, st := s.nsOf(long); st != long {
		t.Errorf("a namespace of %d bytes is stored as %d bytes, want its text", len(long), len(st))
	}
	// Past maxInterned, namespaces keep their text, for good.
	for i := s.nsCount; i < maxInterned; i++ {
		s.nsOf("fill|" + strconv.Itoa(i) + "|")
	}
	late := "late|token_bucket,1/s|"
	if _, st := s.nsOf(late); st != late {
		t.Fatalf("namespace after %d numbered: stored as %q, want its text", maxInterned, st)
	}
	if _, st := s.nsOf(strings.Clone(ns)); st != a {
		t.Fatalf("a namespace numbered before the bound lost its number: %q, want %q", st, a)
	}
}
