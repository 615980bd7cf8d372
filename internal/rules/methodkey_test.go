package rules

import (
	"net/netip"
	"testing"
)

// A method key part counts HEAD as GET: a GET rule applies to HEAD
// because servers answer it with the GET handler (the same work), and
// counted under "HEAD" it had a count of its own, so a client doubled
// its allowance of that work by sending every other request as HEAD.
func TestMethodKeyCountsHeadAsGet(t *testing.T) {
	set := mustCompile(t,
		Spec{Name: "get", Rate: "1/s", Match: MatchSpec{Methods: []string{"GET"}, Path: "/x"}, Key: []string{"ip", "method"}},
		Spec{Name: "any", Rate: "1/s", Key: []string{"method"}},
		Spec{Name: "two", Rate: "1/s", Key: []string{"method", "header:X-Api-Key"}},
	)
	keys := func(method string, headers ...string) map[string][]string {
		t.Helper()
		ms, err := set.Match(request(method, "/x", headers...), ip1, nil)
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		out := map[string][]string{}
		for _, m := range ms {
			out[m.Rule.Name] = append(out[m.Rule.Name], m.Key)
		}
		return out
	}
	get := keys("GET", "X-Api-Key: a", "X-Api-Key: b") // two values: appendKeys
	for _, m := range []string{"HEAD", "head", "Head"} {
		got := keys(m, "X-Api-Key: a", "X-Api-Key: b")
		for _, rule := range []string{"get", "any", "two"} {
			if len(got[rule]) == 0 || len(got[rule]) != len(get[rule]) || got[rule][0] != get[rule][0] || got[rule][len(got[rule])-1] != get[rule][len(get[rule])-1] {
				t.Errorf("%s: rule %s keys %q, want GET's %q", m, rule, got[rule], get[rule])
			}
		}
		r := set.Rule("any")
		if k, ok := r.KeyFor(request(m, "/x"), ip1); !ok || k != r.StoreKey("GET") {
			t.Errorf("%s: KeyFor = %q, %v; want %q", m, k, ok, r.StoreKey("GET"))
		}
	}
	// Other methods keep their own counts.
	if p, g := keys("POST")["any"], get["any"]; len(p) != 1 || p[0] == g[0] {
		t.Errorf("POST keys %q beside GET's %q: want a key of its own", p, g)
	}
}

// FuzzStoreKeyIP: for a rule keyed by ip, a caller's key that is an
// address counts as a request from that address (KeyFor), a prefix as
// the key KeyFor writes for the addresses in it, and any other key as
// written; the key StoreKey writes for an address is its own fixed
// point, so no spelling of a client is a second count.
func FuzzStoreKeyIP(f *testing.F) {
	for _, s := range []string{"203.0.113.7", "::ffff:203.0.113.7", "2001:db8:1:2::9", "2001:DB8:1:2::/64", "fe80::1%eth0", "2001:db8::/48", "::ffff:10.0.0.0/104", "unix:", "k"} {
		f.Add(s)
	}
	r := mustCompile(f, Spec{Name: "ip", Rate: "1/s", Key: []string{"ip"}}).Rules[0]
	head := len(r.keyHead)
	f.Fuzz(func(t *testing.T, s string) {
		got := r.StoreKey(s)
		if a, err := netip.ParseAddr(s); err == nil {
			if want, ok := r.KeyFor(request("GET", "/"), a); !ok || got != want {
				t.Fatalf("StoreKey(%q) = %q, want KeyFor's %q (%v)", s, got, want, ok)
			}
		} else if p, err := netip.ParsePrefix(s); err != nil {
			if got != r.head([]byte(s)) {
				t.Fatalf("StoreKey(%q) = %q, want it as written", s, got)
			}
			return
		} else if got != r.head([]byte(s)) {
			if want, _ := r.KeyFor(request("GET", "/"), p.Addr()); got != want {
				t.Fatalf("StoreKey(%q) = %q, want KeyFor's %q for %v", s, got, want, p.Addr())
			}
		}
		if len(got) > head && got[head] != '#' {
			if again := r.StoreKey(got[head:]); again != got {
				t.Fatalf("StoreKey(%q) = %q, but StoreKey(%q) = %q", s, got, got[head:], again)
			}
		}
	})
}
