package rules

import (
	"errors"
	"net/http"
	"net/netip"
	"slices"
	"testing"
)

// matchAll is Set.Match, failing t on an error.
func matchAll(t testing.TB, s *Set, req *http.Request, ip netip.Addr) []Match {
	t.Helper()
	ms, err := s.Match(req, ip, nil)
	if err != nil {
		t.Fatalf("Match(%s %s): %v", req.Method, req.URL, err)
	}
	return ms
}

func TestMatchAmbiguousKey(t *testing.T) {
	set := mustCompile(t,
		Spec{Name: "h", Rate: "1/s", Key: []string{"header:X-Api-Key"}},
		Spec{Name: "q", Rate: "1/s", Key: []string{"query:api_key"}},
		Spec{Name: "c", Rate: "1/s", Key: []string{"cookie:sid"}},
		Spec{Name: "u", Rate: "1/s", Key: []string{"header:X_Tenant"}},
	)
	for _, tc := range []struct {
		target  string
		headers []string
		want    string // the ambiguous part; "" for none
	}{
		{"/?api_key=k", []string{"X-Api-Key: k", "Cookie: sid=k; other=1", "X_Tenant: t"}, ""},
		{"/?api_key=k&api_keys=1&xapi_key=1&api_ke=1&api=1", []string{"X-Api-Keys: 1", "X_Api_Keys: 1"}, ""},
		{"/?api_key=k&api_key=%zz&x=1;y=2", nil, ""},        // pairs url.ParseQuery and ReverseProxy drop
		{"/?api_key=k&x=1;api_key=y", nil, "query:api_key"}, // Rack 2 splits on ';' too
		{"/?api_key=k;x=1", nil, "query:api_key"},
		{"/?api_key=k&x=1;api%2Ekey=y", nil, "query:api_key"},
		// The same value sent twice: every app reads it (or "a, a", which
		// authenticates nobody), so it is counted, not refused.
		{"/?api_key=k&api_key=k", []string{"X-Api-Key: a", "X-Api-Key: a", "Cookie: sid=s; sid=s"}, ""},
		{"/", []string{"Cookie: sid=s", "Cookie: x=1; sid=s"}, ""},
		{"/", []string{"X_Api_Key: v"}, "header:X-Api-Key"},
		{"/", []string{"X-Api-Key: a", "X-API_KEY: v"}, "header:X-Api-Key"},
		{"/", []string{"X-Tenant: v"}, "header:X_tenant"},
		{"/?api_key[]=b", nil, "query:api_key"},
		{"/?api_key%5Bx%5D=b", nil, "query:api_key"},
		{"/?api.key=b", nil, "query:api_key"},
		{"/?api+key=b", nil, "query:api_key"},
		{"/?+api_key=b", nil, "query:api_key"},
		{"/?api[key=b", nil, "query:api_key"},
		{"/?Api_Key=b", nil, "query:api_key"},
		{"/", []string{"Cookie: s%69d=b"}, "cookie:sid"},
		{"/", []string{"Cookie: SID=b; sid=a"}, "cookie:sid"},
	} {
		req := request("GET", tc.target, tc.headers...)
		ms, err := set.Match(req, ip1, nil)
		var ae *AmbiguousKeyError
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("Match(%s %q) = %v, want no error", tc.target, tc.headers, err)
		case tc.target == "/?api_key=k" && len(ms) != 4:
			t.Errorf("Match(%s %q): %d rules, want 4", tc.target, tc.headers, len(ms))
		case tc.want != "" && (!errors.As(err, &ae) || ae.Part.String() != tc.want):
			t.Errorf("Match(%s %q) = %v, want an AmbiguousKeyError for %s", tc.target, tc.headers, err, tc.want)
		}
	}
}

// TestMatchMultiValued: a key part sent more than once under its own name
// with different values (browsers send a cookie name twice, for different
// paths or domains) is counted under each value, in a row, so that
// whichever the app reads is limited; more than MaxKeysPerRule values, or
// combinations over several parts, are refused as ambiguous.
func TestMatchMultiValued(t *testing.T) {
	set := mustCompile(t,
		Spec{Name: "h", Rate: "1/s", Key: []string{"header:X-Api-Key"}},
		Spec{Name: "q", Rate: "1/s", Key: []string{"query:api_key"}},
		Spec{Name: "c", Rate: "1/s", Key: []string{"cookie:sid"}},
		Spec{Name: "two", Rate: "1/s", Key: []string{"cookie:sid", "header:X-Tenant"}},
	)
	h, q, c, two := set.Rules[0], set.Rules[1], set.Rules[2], set.Rules[3]
	for _, tc := range []struct {
		target  string
		headers []string
		want    []Match // nil with tooMany
		tooMany string  // the part refused for too many values
	}{
		{"/", []string{"X-Api-Key: a", "X-Api-Key: b"}, []Match{{h, h.StoreKey("a")}, {h, h.StoreKey("b")}}, ""},
		{"/", []string{"X-Api-Key: a", "X-Api-Key: a", "X-Api-Key: b"}, []Match{{h, h.StoreKey("a")}, {h, h.StoreKey("b")}}, ""},
		{"/", []string{"X-Api-Key: a", "X-Api-Key: "}, []Match{{h, h.StoreKey("a")}}, ""}, // an empty value is no key
		{"/?api_key=k&api_key=k&api_key=j", nil, []Match{{q, q.StoreKey("k")}, {q, q.StoreKey("j")}}, ""},
		{"/?api_key=a&api%5Fkey=b", nil, []Match{{q, q.StoreKey("a")}, {q, q.StoreKey("b")}}, ""}, // %5F decodes to _: the same name
		{"/", []string{"Cookie: sid=s; sid=s; sid=t"}, []Match{{c, c.StoreKey("s")}, {c, c.StoreKey("t")}}, ""},
		{"/", []string{"Cookie: sid=a", "Cookie: sid=\"b\""}, []Match{{c, c.StoreKey("a")}, {c, c.StoreKey("b")}}, ""},
		{"/", []string{"Cookie: sid=a; sid=b", "X-Tenant: t"}, []Match{
			{c, c.StoreKey("a")}, {c, c.StoreKey("b")}, {two, two.StoreKey("1:a1:t")}, {two, two.StoreKey("1:b1:t")}}, ""},
		{"/", []string{"Cookie: sid=a; sid=b", "X-Tenant: t", "X-Tenant: u"}, []Match{
			{c, c.StoreKey("a")}, {c, c.StoreKey("b")},
			{two, two.StoreKey("1:a1:t")}, {two, two.StoreKey("1:a1:u")}, {two, two.StoreKey("1:b1:t")}, {two, two.StoreKey("1:b1:u")}}, ""},
		{"/", []string{"X-Api-Key: a", "X-Api-Key: b", "X-Api-Key: c", "X-Api-Key: d"}, []Match{
			{h, h.StoreKey("a")}, {h, h.StoreKey("b")}, {h, h.StoreKey("c")}, {h, h.StoreKey("d")}}, ""},
		{"/", []string{"X-Api-Key: a", "X-Api-Key: b", "X-Api-Key: c", "X-Api-Key: d", "X-Api-Key: e"}, nil, "header:X-Api-Key"},
		{"/", []string{"Cookie: sid=a; sid=b; sid=c", "X-Tenant: t", "X-Tenant: u"}, nil, "header:X-Tenant"},
	} {
		req := request("GET", tc.target, tc.headers...)
		ms, err := set.Match(req, ip1, nil)
		if tc.tooMany != "" {
			var ae *AmbiguousKeyError
			if !errors.As(err, &ae) || !ae.TooMany || ae.Part.String() != tc.tooMany {
				t.Errorf("Match(%s %q) = %v, want too many values of %s", tc.target, tc.headers, err, tc.tooMany)
			}
			continue
		}
		if err != nil {
			t.Errorf("Match(%s %q) = %v, want no error", tc.target, tc.headers, err)
			continue
		}
		if !slices.Equal(ms, tc.want) {
			t.Errorf("Match(%s %q) =\n  %v\nwant\n  %v", tc.target, tc.headers, ms, tc.want)
		}
	}
}

// FuzzMatchRepeated: a header key part sent with any values is counted
// under each different non-empty value, in the order first sent, or —
// more than MaxKeysPerRule of them — refused as too many; never under a
// value that was not sent.
func FuzzMatchRepeated(f *testing.F) {
	f.Add("a", "b", "a", "")
	f.Add("a", "", "", "")
	f.Add("x, y", "x", "y", "z")
	f.Add("1", "2", "3", "4")
	set := mustCompile(f, Spec{Name: "h", Rate: "1/s", Key: []string{"header:X-Api-Key"}})
	r := set.Rules[0]
	f.Fuzz(func(t *testing.T, a, b, c, d string) {
		vs := []string{a, b, c, d, "e"}
		req := request("GET", "/")
		req.Header["X-Api-Key"] = vs
		var want []Match
		seen := map[string]bool{}
		for _, v := range vs {
			if v != "" && !seen[v] {
				seen[v] = true
				want = append(want, Match{Rule: r, Key: r.StoreKey(v)})
			}
		}
		ms, err := set.Match(req, ip1, nil)
		if len(want) > MaxKeysPerRule {
			var ae *AmbiguousKeyError
			if !errors.As(err, &ae) || !ae.TooMany {
				t.Fatalf("Match(%q) = %v, %v; want too many values", vs, ms, err)
			}
			return
		}
		if err != nil || !slices.Equal(ms, want) {
			t.Fatalf("Match(%q) = %v, %v; want %v", vs, ms, err, want)
		}
	})
}
