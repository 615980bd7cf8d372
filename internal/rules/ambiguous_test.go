package rules

import (
	"errors"
	"net/http"
	"net/netip"
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
		{"/", []string{"X-Api-Key: a", "X-Api-Key: b"}, "header:X-Api-Key"},
		// The same value sent twice: every app reads it (or "a, a", which
		// authenticates nobody), so it is counted, not refused.
		{"/?api_key=k&api_key=k", []string{"X-Api-Key: a", "X-Api-Key: a", "Cookie: sid=s; sid=s"}, ""},
		{"/", []string{"Cookie: sid=s", "Cookie: x=1; sid=s"}, ""},
		{"/", []string{"X-Api-Key: a", "X-Api-Key: a", "X-Api-Key: b"}, "header:X-Api-Key"},
		{"/?api_key=k&api_key=k&api_key=j", nil, "query:api_key"},
		{"/", []string{"Cookie: sid=s; sid=s; sid=t"}, "cookie:sid"},
		{"/", []string{"X_Api_Key: v"}, "header:X-Api-Key"},
		{"/", []string{"X-Api-Key: a", "X-API_KEY: v"}, "header:X-Api-Key"},
		{"/", []string{"X-Tenant: v"}, "header:X_tenant"},
		{"/?api_key=a&api_key=b", nil, "query:api_key"},
		{"/?api_key=a&api%5Fkey=b", nil, "query:api_key"},
		{"/?api_key[]=b", nil, "query:api_key"},
		{"/?api_key%5Bx%5D=b", nil, "query:api_key"},
		{"/?api.key=b", nil, "query:api_key"},
		{"/?api+key=b", nil, "query:api_key"},
		{"/?+api_key=b", nil, "query:api_key"},
		{"/?api[key=b", nil, "query:api_key"},
		{"/?Api_Key=b", nil, "query:api_key"},
		{"/", []string{"Cookie: sid=a; sid=b"}, "cookie:sid"},
		{"/", []string{"Cookie: sid=a", "Cookie: sid=b"}, "cookie:sid"},
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
