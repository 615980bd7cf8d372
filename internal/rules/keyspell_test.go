package rules

import (
	"slices"
	"strings"
	"testing"
)

// A header:Host key counts the host as a server routes on it: case
// folded, without a port or a final dot (as nginx's $host writes it). Go
// servers, Caddy and Traefik pass the Host on as the client wrote it, and
// a site serves "API.Example.com:8000" and "api.example.com." as
// "api.example.com": counted as written, each spelling was a fresh count
// of the same site's limit.
func TestHostKeySpellings(t *testing.T) {
	r := mustCompile(t, Spec{Name: "site", Rate: "1/s", Key: []string{"header:Host"}}).Rules[0]
	for _, tc := range []struct{ hosts []string }{
		{[]string{"api.example.com", "API.Example.COM", "api.example.com:8000", "api.example.com.", "Api.Example.Com.:443", "api.example.com:"}},
		{[]string{"127.0.0.1", "127.0.0.1:8000"}},
		{[]string{"[::1]", "[::1]:8000"}},
		{[]string{"[2001:DB8::1]", "[2001:db8::1]:80", "[2001:db8:0::1]", "[2001:0db8:0:0:0:0:0:1]:8000"}},
	} {
		first := request("GET", "/")
		first.Host = tc.hosts[0]
		want, ok := r.KeyFor(first, ip1)
		if !ok {
			t.Fatalf("Host %q: no key", tc.hosts[0])
		}
		for _, h := range tc.hosts[1:] {
			req := request("GET", "/")
			req.Host = h
			if got, ok := r.KeyFor(req, ip1); !ok || got != want {
				t.Errorf("Host %q: key %q, %v; want %q, the key of %q", h, got, ok, want, tc.hosts[0])
			}
			// Beside another spelling of itself (a request's Host is one
			// value), and through Set.Match.
			set := &Set{Rules: []*Rule{r}}
			if ms, err := set.Match(req, ip1, nil); err != nil || len(ms) != 1 || ms[0].Key != want {
				t.Errorf("Host %q: Match = %v, %v; want one match keyed %q", h, ms, err, want)
			}
		}
	}
	// Other hosts keep their own counts; a Host that would be empty
	// without its port or dot is kept as it came, so that it is counted.
	seen := map[string]string{}
	for _, h := range []string{"api.example.com", "api.example.org", "example.com", "[::2]", ":80", ".", "a..", "a.b:c"} {
		req := request("GET", "/")
		req.Host = h
		k, ok := r.KeyFor(req, ip1)
		if !ok {
			t.Errorf("Host %q: no key", h)
			continue
		}
		if o, dup := seen[k]; dup {
			t.Errorf("Hosts %q and %q share the key %q", o, h, k)
		}
		seen[k] = h
	}
}

// A cookie key part is read URL-decoded, as PHP, Node's cookie module
// (Express), Rack and Rails read cookie values: "sid=%61bc" is the session
// "abc" to them, and counted as written each escape was a fresh count of
// the same session. '+' reads as a space, as PHP and Rack read it (Node
// keeps it: counting "a+b" and "a b" as one errs on the side of the
// limit). An escape that does not decode stays as it is, as they keep it.
func TestCookieKeyDecoded(t *testing.T) {
	set := mustCompile(t, Spec{Name: "c", Rate: "1/s", Key: []string{"cookie:sid"}})
	c := set.Rules[0]
	for _, tc := range []struct {
		cookie string
		want   []Match
	}{
		{"sid=abc", []Match{{c, c.StoreKey("abc")}}},
		{"sid=%61bc", []Match{{c, c.StoreKey("abc")}}},
		{"sid=a%62%63", []Match{{c, c.StoreKey("abc")}}},
		{`sid="%61bc"`, []Match{{c, c.StoreKey("abc")}}},
		{"sid=ab+c", []Match{{c, c.StoreKey("ab c")}}},
		{"sid=ab%20c", []Match{{c, c.StoreKey("ab c")}}},
		{"sid=a%zz", []Match{{c, c.StoreKey("a%zz")}}},
		{"sid=abc; sid=%61bc", []Match{{c, c.StoreKey("abc")}}},                         // one value, twice
		{"sid=abc; sid=%61bd", []Match{{c, c.StoreKey("abc")}, {c, c.StoreKey("abd")}}}, // two
	} {
		ms, err := set.Match(request("GET", "/", "Cookie: "+tc.cookie), ip1, nil)
		if err != nil || !slices.Equal(ms, tc.want) {
			t.Errorf("Cookie: %s: Match = %v, %v; want %v", tc.cookie, ms, err, tc.want)
		}
		k, ok := c.KeyFor(request("GET", "/", "Cookie: "+tc.cookie), ip1)
		if len(tc.want) == 1 && (!ok || k != tc.want[0].Key) {
			t.Errorf("Cookie: %s: KeyFor = %q, %v; want %q", tc.cookie, k, ok, tc.want[0].Key)
		}
	}
}

// FuzzHostKey: the host a header:Host part counts is the same whatever
// the case of the Host's ASCII letters, has none in upper case, and is
// never empty for a Host that is not.
func FuzzHostKey(f *testing.F) {
	for _, h := range []string{"api.example.com", "API.Example.com:8000", "[::1]:80", ":80", ".", "a..", "a.b:c", "[::1]x", "\xc3\x84.example"} {
		f.Add(h)
	}
	upper := func(s string) string {
		b := []byte(s)
		for i, c := range b {
			if 'a' <= c && c <= 'z' {
				b[i] = c - 'a' + 'A'
			}
		}
		return string(b)
	}
	f.Fuzz(func(t *testing.T, h string) {
		k := HostKey(h)
		if h != "" && k == "" {
			t.Fatalf("HostKey(%q) is empty", h)
		}
		if k2 := HostKey(upper(h)); k2 != k {
			t.Fatalf("HostKey(%q) = %q, but of %q it is %q", h, k, upper(h), k2)
		}
		if strings.ContainsAny(k, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") {
			t.Fatalf("HostKey(%q) = %q, with upper case", h, k)
		}
	})
}

// A query key part is read past a '#' too: Go's server and PHP (through
// Caddy's php_fastcgi, which passes the query on as it came) read
// "?x=1#&api_key=victim" as api_key=victim, while Node, Puma and nginx
// end the query at the '#'. Both readings are counted.
func TestQueryKeyPastFragment(t *testing.T) {
	set := mustCompile(t, Spec{Name: "q", Rate: "1/s", Key: []string{"query:api_key"}})
	q := set.Rules[0]
	for _, tc := range []struct {
		target string
		want   []Match
	}{
		{"/?x=1#&api_key=victim", []Match{{q, q.StoreKey("victim")}}},
		{"/?api_key=fresh#&api_key=victim", []Match{{q, q.StoreKey("fresh")}, {q, q.StoreKey("fresh#")}, {q, q.StoreKey("victim")}}},
		{"/?api_key=victim#x", []Match{{q, q.StoreKey("victim")}, {q, q.StoreKey("victim#x")}}},
		{"/?api_key=victim", []Match{{q, q.StoreKey("victim")}}},
	} {
		req := request("GET", "/")
		req.URL.RawQuery = tc.target[2:]
		ms, err := set.Match(req, ip1, nil)
		if err != nil || !slices.Equal(ms, tc.want) {
			t.Errorf("%s: Match = %v, %v; want %v", tc.target, ms, err, tc.want)
		}
	}
}

// HostKey removes one final dot, not more: nginx's $host and Apache
// remove one ("a.example." is "a.example") and refuse a Host with an
// empty label ("a.example..", "a..example": 400), and Go's ServeMux and
// Caddy match the Host as sent (after case and port), so no server
// routes "a.example.." to the site "a.example": it names no site, and is
// counted as the host it is. A client free to send any Host to a
// catch-all server has a count per name it makes up, whatever HostKey
// does; a rule keyed by header:Host limits a site, not a client.
func TestHostKeyOneFinalDot(t *testing.T) {
	for h, want := range map[string]string{
		"a.example.":     "a.example",
		"A.Example.:443": "a.example",
		"a.example..":    "a.example.",
		"a.example..:80": "a.example.",
		"a..example":     "a..example",
	} {
		if got := HostKey(h); got != want {
			t.Errorf("HostKey(%q) = %q, want %q", h, got, want)
		}
	}
	if HostKey("a.example..") == HostKey("a.example") {
		t.Error(`"a.example.." counts as the site "a.example", which no server routes it to`)
	}
}
