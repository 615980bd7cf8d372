package rules

import (
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
)

// A POST that names another method in a method-override header
// (X-HTTP-Method-Override: Express's method-override, Symfony and
// Laravel, Google APIs; X-HTTP-Method; X-Method-Override), in any case
// and also spelled with '_' as CGI-style servers read it, or in the query
// parameter _method (Laravel and Symfony; Express's method-override given
// "_method"), is served as that method by such frameworks: the rules
// match and count it under both readings, its own method and the
// override's, upper-cased. A rule for DELETE applies to it once; a rule
// keyed by method counts it under POST and under DELETE; a rule that
// does not care about the method counts it once. Only a POST is read so,
// as the frameworks read only a POST's.
func TestMethodOverrideReadings(t *testing.T) {
	set := mustCompile(t,
		Spec{Name: "del", Rate: "1/s", Match: MatchSpec{Methods: []string{"DELETE"}, Path: "/items/*"}},
		Spec{Name: "post", Rate: "1/s", Match: MatchSpec{Methods: []string{"POST"}}},
		Spec{Name: "bymethod", Rate: "1/s", Key: []string{"method"}},
		Spec{Name: "two", Rate: "1/s", Key: []string{"ip", "method"}, Match: MatchSpec{Methods: []string{"DELETE", "POST", "PUT"}}},
		Spec{Name: "any", Rate: "1/s", Key: []string{"ip"}},
	)
	keys := func(method, target string, headers ...string) map[string][]string {
		t.Helper()
		ms, err := set.Match(request(method, target, headers...), ip1, nil)
		if err != nil {
			t.Fatalf("%s %s %q: %v", method, target, headers, err)
		}
		out := map[string][]string{}
		for _, m := range ms {
			out[m.Rule.Name] = append(out[m.Rule.Name], m.Key)
		}
		return out
	}
	by := set.Rule("bymethod")
	two := set.Rule("two")
	twoKey := func(m string) string { return two.keyHead + "9:192.0.2.1" + lenValue(m) }
	overridden := []struct {
		target  string
		headers []string
	}{
		{"/items/1", []string{"X-HTTP-Method-Override: DELETE"}},
		{"/items/1", []string{"X-Http-Method-Override: delete"}},
		{"/items/1", []string{"X-HTTP-Method: DELETE"}},
		{"/items/1", []string{"X-Method-Override: Delete"}},
		{"/items/1", []string{"X_HTTP_Method_Override: DELETE"}},
		{"/items/1", []string{"X-HTTP-Method-Override:  DELETE "}},
		{"/items/1", []string{"X-HTTP-Method-Override: DELETE, PATCH"}}, // Express reads the first; counted under each
		{"/items/1?_method=DELETE", nil},
		{"/items/1?_method=delete&x=1", nil},
		{"/items/1?%5Fmethod=DELETE", nil},
		{"/items/1?.method=DELETE", nil}, // PHP reads it as _method
		{"/items/1?x=1#&_method=DELETE", nil},
	}
	for _, c := range overridden {
		got := keys("POST", c.target, c.headers...)
		if len(got["del"]) != 1 {
			t.Errorf("POST %s %q: rule del (DELETE) applies %d times, want once", c.target, c.headers, len(got["del"]))
		}
		if len(got["post"]) != 1 || len(got["any"]) != 1 {
			t.Errorf("POST %s %q: rules post and any apply %d, %d times, want once each", c.target, c.headers, len(got["post"]), len(got["any"]))
		}
		if k := got["bymethod"]; !slices.Contains(k, by.StoreKey("POST")) || !slices.Contains(k, by.StoreKey("DELETE")) {
			t.Errorf("POST %s %q: rule bymethod keys %q, want POST's and DELETE's", c.target, c.headers, k)
		}
		if k := got["two"]; !slices.Contains(k, twoKey("POST")) || !slices.Contains(k, twoKey("DELETE")) {
			t.Errorf("POST %s %q: rule two keys %q, want POST's and DELETE's", c.target, c.headers, k)
		}
	}
	// Not read: another method's override, a value that is no method,
	// the override of the request's own method.
	for _, c := range []struct {
		method, target string
		headers        []string
	}{
		{"GET", "/items/1", []string{"X-HTTP-Method-Override: DELETE"}},
		{"PUT", "/items/1?_method=DELETE", nil},
		{"POST", "/items/1", []string{"X-HTTP-Method-Override: DEL ETE"}},
		{"POST", "/items/1", []string{"X-HTTP-Method-Override: POST"}},
		{"POST", "/items/1?method=DELETE", nil},
		{"POST", "/items/1", []string{"X-Other: DELETE"}},
	} {
		got := keys(c.method, c.target, c.headers...)
		if len(got["del"]) != 0 {
			t.Errorf("%s %s %q: rule del applies, want not", c.method, c.target, c.headers)
		}
		if len(got["bymethod"]) != 1 || got["bymethod"][0] != by.StoreKey(c.method) {
			t.Errorf("%s %s %q: rule bymethod keys %q, want %s's alone", c.method, c.target, c.headers, got["bymethod"], c.method)
		}
	}
	// HEAD as an override is GET's count, as HEAD itself is.
	if k := keys("POST", "/x", "X-HTTP-Method-Override: HEAD", "X-HTTP-Method: GET")["bymethod"]; len(k) != 2 || !slices.Contains(k, by.StoreKey("GET")) {
		t.Errorf("POST with overrides HEAD and GET: bymethod keys %q, want POST's and GET's, once each", k)
	}
}

// lenValue writes v as a part of a key of several parts.
func lenValue(v string) string { return string(appendValue(nil, v, false)) }

// The readings of one request are bounded: a POST naming more than
// MaxKeysPerRule methods, its own included, is refused as ambiguous by a
// rule that cares about the method (methods or a method key part) and
// applies to its path; one that does not care counts it once.
func TestMethodOverrideTooMany(t *testing.T) {
	set := mustCompile(t,
		Spec{Name: "any", Rate: "1/s"},
		Spec{Name: "other", Rate: "1/s", Match: MatchSpec{Methods: []string{"DELETE"}, Path: "/other"}},
		Spec{Name: "del", Rate: "1/s", Match: MatchSpec{Methods: []string{"DELETE"}, Path: "/items/*"}},
	)
	many := []string{"X-HTTP-Method-Override: DELETE", "X-HTTP-Method: PUT", "X-Method-Override: PATCH, OPTIONS"}
	_, err := set.Match(request("POST", "/items/1", many...), ip1, nil)
	var ae *AmbiguousKeyError
	if !errors.As(err, &ae) || ae.Rule.Name != "del" || ae.Part.Kind != PartMethod || !ae.TooMany {
		t.Fatalf("POST naming 4 other methods: %v, want an AmbiguousKeyError of rule del, part method, too many", err)
	}
	if want := `ambiguous key: rule "del": the request names more than 4 methods (its own and its method overrides'), which the app behind may serve it as any of`; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	// Four readings in all pass.
	ms, err := set.Match(request("POST", "/items/1", many[:2]...), ip1, nil)
	if err != nil || len(ms) != 2 {
		t.Fatalf("POST naming 2 other methods: %d matches, %v; want 2 (any, del)", len(ms), err)
	}
	// A path no method-minded rule applies to is not refused.
	if ms, err := set.Match(request("POST", "/elsewhere", many...), ip1, nil); err != nil || len(ms) != 1 {
		t.Fatalf("POST /elsewhere naming 4 other methods: %d matches, %v; want rule any alone", len(ms), err)
	}
}

// FuzzMethodOverride: a POST with any X-HTTP-Method-Override value and
// any query _method is counted, by a rule keyed by method, under POST and
// under each method they name (a token, trimmed and upper-cased; HEAD as
// GET), each once, in the order named — or, naming more than
// MaxKeysPerRule methods in all, refused as too many; a rule for DELETE
// applies once if DELETE is among them, else not at all.
func FuzzMethodOverride(f *testing.F) {
	f.Add("DELETE", "")
	f.Add("delete, put", "PATCH")
	f.Add(" HEAD ,GET", "get")
	f.Add("a,b,c,d", "e")
	f.Add("DEL ETE", "DELETE#x")
	set := mustCompile(f,
		Spec{Name: "by", Rate: "1/s", Key: []string{"method"}},
		Spec{Name: "del", Rate: "1/s", Match: MatchSpec{Methods: []string{"DELETE"}}},
	)
	by := set.Rule("by")
	f.Fuzz(func(t *testing.T, h, q string) {
		req := request("POST", "/?_method="+url.QueryEscape(q))
		req.Header["X-Http-Method-Override"] = []string{h}
		named := []string{"POST"}
		add := func(m string) {
			m = strings.ToUpper(strings.TrimSpace(m))
			if m != "" && httpguts.ValidHeaderFieldName(m) && !slices.Contains(named, m) {
				named = append(named, m)
			}
		}
		for _, m := range strings.Split(h, ",") {
			add(m)
		}
		add(q)
		ms, err := set.Match(req, ip1, nil)
		if len(named) > MaxKeysPerRule {
			var ae *AmbiguousKeyError
			if !errors.As(err, &ae) || !ae.TooMany || ae.Part.Kind != PartMethod {
				t.Fatalf("POST naming %q: %v, %v; want too many methods", named, ms, err)
			}
			return
		}
		var want []Match
		for _, m := range named {
			if w := (Match{Rule: by, Key: by.StoreKey(m)}); !slices.Contains(want, w) {
				want = append(want, w)
			}
		}
		if slices.Contains(named, "DELETE") {
			want = append(want, Match{Rule: set.Rule("del"), Key: set.Rule("del").StoreKey("192.0.2.1")})
		}
		if err != nil || !slices.Equal(ms, want) {
			t.Fatalf("POST naming %q: %v, %v; want %v", named, ms, err, want)
		}
	})
}
