package rules

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func mustCompile(t testing.TB, specs ...Spec) *Set {
	t.Helper()
	s, err := Compile("test.yaml", specs)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return s
}

func TestMatches(t *testing.T) {
	tests := []struct {
		match  MatchSpec
		method string
		path   string
		want   bool
	}{
		{MatchSpec{}, "GET", "/anything", true},
		{MatchSpec{}, "DELETE", "/", true},
		{MatchSpec{Path: "/login"}, "POST", "/login", true},
		{MatchSpec{Path: "/login"}, "POST", "/login/", true}, // trailing slash removed
		{MatchSpec{Path: "/login"}, "POST", "/login/x", false},
		{MatchSpec{Path: "/login"}, "POST", "/loginx", false},
		{MatchSpec{Path: "/login"}, "POST", "/Login", false}, // paths are case-sensitive
		{MatchSpec{Path: "/login", CaseInsensitive: true}, "POST", "/Login", true},
		{MatchSpec{Path: "/Login", CaseInsensitive: true}, "POST", "/LOGIN", true},
		{MatchSpec{Path: "/api/*", CaseInsensitive: true}, "GET", "/API/x", true},
		{MatchSpec{Path: "/login"}, "POST", "//login", true}, // cleaned
		{MatchSpec{Path: "/login"}, "POST", "/a/../login", true},
		{MatchSpec{Path: "/login"}, "POST", "/./login", true},
		{MatchSpec{Path: "/login"}, "POST", "", false},
		{MatchSpec{Path: "/api/*"}, "GET", "/api", true},
		{MatchSpec{Path: "/api/*"}, "GET", "/api/", true},
		{MatchSpec{Path: "/api/*"}, "GET", "/api/x/y", true},
		{MatchSpec{Path: "/api/*"}, "GET", "/api//x", true},
		{MatchSpec{Path: "/api/*"}, "GET", "/apix", false},
		{MatchSpec{Path: "/api/*"}, "GET", "/ap", false},
		{MatchSpec{Path: "/api/*"}, "GET", "/x/../api/v1", true},
		// Under /api/ for servers that route on the path as sent (Node,
		// Express; Go's ServeMux for escaped dots and slashes), /admin
		// for those that resolve dot segments first: both count.
		{MatchSpec{Path: "/api/*"}, "GET", "/api/../admin", true},
		{MatchSpec{Path: "/api/*"}, "GET", "/api/%2E%2E/admin", true},
		{MatchSpec{Path: "/api/*"}, "GET", "/api/..%2fadmin", true},
		{MatchSpec{Path: "/api/*", CaseInsensitive: true}, "GET", "/API/%2e%2E/admin", true},
		{MatchSpec{Path: "/api/*"}, "GET", "/api%2F..%2Fadmin", false}, // one segment "api/../admin": / for both
		{MatchSpec{Path: "/admin"}, "GET", "/api/../admin", true},
		{MatchSpec{Path: "/admin"}, "GET", "/api/..%2Fadmin", true},
		{MatchSpec{Path: "/*"}, "GET", "/", true},
		{MatchSpec{Path: "/*"}, "GET", "/a/b", true},
		{MatchSpec{Path: "/"}, "GET", "/", true},
		{MatchSpec{Path: "/"}, "GET", "/a", false},
		{MatchSpec{Path: "/dir/"}, "GET", "/dir/", true},
		{MatchSpec{Path: "/dir/"}, "GET", "/dir", true},
		{MatchSpec{Methods: []string{"POST"}}, "POST", "/x", true},
		{MatchSpec{Methods: []string{"POST"}}, "post", "/x", true}, // methods compare case-insensitively
		{MatchSpec{Methods: []string{"post", "PUT"}}, "PUT", "/x", true},
		{MatchSpec{Methods: []string{"POST"}}, "GET", "/x", false},
		{MatchSpec{Methods: []string{"GET"}}, "HEAD", "/x", true}, // HEAD runs GET's handler: no way around a GET rule
		{MatchSpec{Methods: []string{"get"}}, "head", "/x", true},
		{MatchSpec{Methods: []string{"HEAD"}}, "GET", "/x", false},
		{MatchSpec{Methods: []string{"GET"}}, "OPTIONS", "/x", false},
		{MatchSpec{Methods: []string{"GET"}, Path: "/login"}, "HEAD", "/logout", false},
		{MatchSpec{Methods: []string{"POST"}, Path: "/login"}, "POST", "/login", true},
		{MatchSpec{Methods: []string{"POST"}, Path: "/login"}, "GET", "/login", false},
		{MatchSpec{Methods: []string{"POST"}, Path: "/login"}, "POST", "/logout", false},
	}
	for _, tt := range tests {
		r := mustCompile(t, Spec{Name: "r", Rate: "1/s", Match: tt.match}).Rules[0]
		if got := r.Matches(tt.method, tt.path); got != tt.want {
			t.Errorf("rule %+v: Matches(%q, %q) = %v, want %v", tt.match, tt.method, tt.path, got, tt.want)
		}
	}
}

// request builds a request to target with the given headers
// ("Name: value" strings).
func request(method, target string, headers ...string) *http.Request {
	req := httptest.NewRequest(method, target, nil)
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Add(k, v)
	}
	return req
}

var ip1 = netip.MustParseAddr("192.0.2.1")

func TestKeyFor(t *testing.T) {
	tests := []struct {
		key     []string
		req     *http.Request
		ip      netip.Addr
		want    string // the part after NAME|FINGERPRINT|
		wantOK  bool
		comment string
	}{
		{[]string{"ip"}, request("GET", "/"), ip1, "192.0.2.1", true, "single part: raw value"},
		{nil, request("GET", "/"), ip1, "192.0.2.1", true, "default key: ip"},
		{[]string{"ip"}, request("GET", "/"), netip.Addr{}, "", false, "no client address"},
		{[]string{"ip"}, request("GET", "/"), netip.MustParseAddr("::ffff:192.0.2.1"), "192.0.2.1", true, "IPv4-mapped"},
		{[]string{"ip"}, request("GET", "/"), UnixClient, "unix:", true, "a Unix socket's peer: one key for all"},
		{[]string{"ip", "method"}, request("GET", "/"), UnixClient, "5:unix:3:GET", true, "a Unix socket's peer in a composite key"},
		{[]string{"ip"}, request("GET", "/"), netip.IPv6Unspecified(), "::/64", true, "the unspecified address is not the Unix peer"},
		{[]string{"ip"}, request("GET", "/"), netip.MustParseAddr("2001:db8::1%eth0"), "2001:db8::/64", true, "IPv6: the /64, zone dropped"},
		{[]string{"ip"}, request("GET", "/"), netip.MustParseAddr("2001:db8:1:2:aaaa::1"), "2001:db8:1:2::/64", true, "IPv6: the /64"},
		{[]string{"ip", "method"}, request("GET", "/"), netip.MustParseAddr("2001:db8:1:2:aaaa::1"), "17:2001:db8:1:2::/643:GET", true, "IPv6 /64 in a composite key"},
		{[]string{"header:x-api-key"}, request("GET", "/", "X-Api-Key: k1"), ip1, "k1", true, "header name canonicalised"},
		{[]string{"header:X-Api-Key"}, request("GET", "/", "X-Api-Key: k1", "X-Api-Key: k2"), ip1, "", false, "twice: ambiguous (AmbiguousKeyError)"},
		{[]string{"header:X-Api-Key"}, request("GET", "/"), ip1, "", false, "missing header"},
		{[]string{"header:X-Api-Key"}, request("GET", "/", "X-Api-Key: "), ip1, "", false, "empty header"},
		{[]string{"header:host"}, request("GET", "http://api.example.com/"), ip1, "api.example.com", true, "Host lives in req.Host"},
		{[]string{"query:user"}, request("GET", "/?user=bob&x=1"), ip1, "bob", true, ""},
		{[]string{"query:user"}, request("GET", "/?x=1&user=b%20o+b"), ip1, "b o b", true, "unescaped"},
		{[]string{"query:user"}, request("GET", "/?x=1&user=b%20o+b&user=eve"), ip1, "", false, "twice: ambiguous (AmbiguousKeyError)"},
		{[]string{"query:user name"}, request("GET", "/?user+name=z"), ip1, "z", true, "escaped name"},
		{[]string{"query:user"}, request("GET", "/?username=bob"), ip1, "", false, "prefix is not the name"},
		{[]string{"query:user"}, request("GET", "/?user="), ip1, "", false, "empty value"},
		{[]string{"query:user"}, request("GET", "/?user=%zz"), ip1, "", false, "bad escape"},
		{[]string{"query:user"}, request("GET", "/?user=%zz&user=eve"), ip1, "eve", true, "a pair with a bad escape skipped, as url.ParseQuery does"},
		{[]string{"query:user"}, request("GET", "/?x=1;y=2&user=eve"), ip1, "eve", true, "a pair with a ';' skipped, as url.ParseQuery does"},
		{[]string{"query:user"}, request("GET", "/?user=x;y&user=eve"), ip1, "", false, "a pair with a ';' naming the key: ambiguous (Rack 2 splits on ';')"},
		{[]string{"cookie:session"}, request("GET", "/", "Cookie: a=1; session=s3"), ip1, "s3", true, ""},
		{[]string{"cookie:session"}, request("GET", "/", "Cookie: a=1"), ip1, "", false, "missing cookie"},
		{[]string{"method"}, request("post", "/"), ip1, "POST", true, "method upper-cased"},
		{[]string{"path"}, request("GET", "/a//b/../c?q=1"), ip1, "/a/c", true, "path cleaned, no query"},
		{[]string{"ip", "method"}, request("GET", "/"), ip1, "9:192.0.2.1" + "3:GET", true, "several parts: length-prefixed"},
		{[]string{"header:A", "header:B"}, request("GET", "/", "A: x", "B: yz"), ip1, "1:x2:yz", true, ""},
		{[]string{"header:A", "header:B"}, request("GET", "/", "A: x"), ip1, "", false, "one part missing: rule does not apply"},
		{[]string{"header:A"}, request("GET", "/", "A: #tag"), ip1, "##tag", true, "a leading # is doubled"},
	}
	for _, tt := range tests {
		r := mustCompile(t, Spec{Name: "r", Rate: "1/s", Key: tt.key}).Rules[0]
		got, ok := r.KeyFor(tt.req, tt.ip)
		if ok != tt.wantOK || (ok && got != "r|"+r.Fingerprint+"|"+tt.want) {
			t.Errorf("%s: key %v: KeyFor(%s %s) = %q, %v; want %q, %v", tt.comment, tt.key, tt.req.Method, tt.req.URL, got, ok, "r|"+r.Fingerprint+"|"+tt.want, tt.wantOK)
		}
	}
}

func TestKeyForBounded(t *testing.T) {
	r := mustCompile(t, Spec{Name: "r", Rate: "1/s", Key: []string{"header:X-Api-Key"}}).Rules[0]
	huge := strings.Repeat("A", 1<<20)
	k1, ok := r.KeyFor(request("GET", "/", "X-Api-Key: "+huge), ip1)
	if !ok || len(k1) > MaxNameLen+10+MaxKeyLen || strings.Contains(k1, "AAAA") {
		t.Fatalf("KeyFor(1 MiB header) = %d bytes %.80q, want a short hashed key", len(k1), k1)
	}
	k2, _ := r.KeyFor(request("GET", "/", "X-Api-Key: "+huge[1:]+"B"), ip1)
	if k1 == k2 {
		t.Errorf("KeyFor: two different huge values hash alike: %q", k1)
	}
	k3, _ := r.KeyFor(request("GET", "/", "X-Api-Key: "+huge), ip1)
	if k1 != k3 {
		t.Errorf("KeyFor: same huge value, keys %q and %q differ", k1, k3)
	}
	// At the bound the value is kept; one past it, hashed.
	at, _ := r.KeyFor(request("GET", "/", "X-Api-Key: "+huge[:MaxKeyLen]), ip1)
	past, _ := r.KeyFor(request("GET", "/", "X-Api-Key: "+huge[:MaxKeyLen+1]), ip1)
	if !strings.HasSuffix(at, huge[:MaxKeyLen]) || !strings.Contains(past, "|#") || len(past) != len("r|")+8+len("|#")+64 {
		t.Errorf("KeyFor at the bound = %q…, past it = %q", at[:20], past)
	}
	if got := r.StoreKey(huge); got != k1 {
		t.Errorf("StoreKey(huge) = %q, want KeyFor's %q", got, k1)
	}
}

func TestKeyForNoCollisions(t *testing.T) {
	// Values containing what a naive join would use as a separator must not
	// collide: each pair of requests below would give the same key if the
	// values were joined with "|" or ":".
	r := mustCompile(t, Spec{Name: "r", Rate: "1/s", Key: []string{"header:A", "header:B"}}).Rules[0]
	pairs := [][2][2]string{
		{{"x|y", "z"}, {"x", "y|z"}},
		{{"1:x", "1:y"}, {"1:x1:y", "1"}},
		{{"x:", "y"}, {"x", ":y"}},
		{{"3:abc", "1"}, {"3", "abc1"}},
	}
	for _, p := range pairs {
		ka, _ := r.KeyFor(request("GET", "/", "A: "+p[0][0], "B: "+p[0][1]), ip1)
		kb, _ := r.KeyFor(request("GET", "/", "A: "+p[1][0], "B: "+p[1][1]), ip1)
		if ka == kb {
			t.Errorf("KeyFor(A=%q B=%q) == KeyFor(A=%q B=%q) = %q", p[0][0], p[0][1], p[1][0], p[1][1], ka)
		}
	}
	// A raw single value cannot imitate a hashed one.
	one := mustCompile(t, Spec{Name: "r", Rate: "1/s", Key: []string{"header:A"}}).Rules[0]
	long := strings.Repeat("z", MaxKeyLen+1)
	hashed, _ := one.KeyFor(request("GET", "/", "A: "+long), ip1)
	fake := hashed[strings.LastIndexByte(hashed, '|')+1:] // "#<hex>"
	if k, _ := one.KeyFor(request("GET", "/", "A: "+fake), ip1); k == hashed {
		t.Errorf("KeyFor(%q) imitates the hash of a long value: %q", fake, k)
	}
	// Rules with the same limit but different names never share keys.
	set := mustCompile(t, Spec{Name: "a", Rate: "1/s"}, Spec{Name: "b", Rate: "1/s"})
	ka, _ := set.Rules[0].KeyFor(request("GET", "/"), ip1)
	kb, _ := set.Rules[1].KeyFor(request("GET", "/"), ip1)
	if ka == kb {
		t.Errorf("rules a and b share key %q", ka)
	}
}

func TestFingerprint(t *testing.T) {
	base := Spec{Name: "r", Rate: "10/s", Key: []string{"ip"}}
	fp := func(s Spec) string { return mustCompile(t, s).Rules[0].Fingerprint }
	// Pinned: store keys outlive a daemon; an upgrade must not reset every
	// counter by changing how fingerprints are computed.
	if got, want := fp(base), fp(base); got != want || len(got) != 8 {
		t.Fatalf("Fingerprint not stable: %q, %q", got, want)
	}
	if got := fp(base); got != pinnedFingerprint {
		t.Errorf("Fingerprint(10/s ip sliding_window_counter) = %q, want %q", got, pinnedFingerprint)
	}
	same := []func(*Spec){
		func(s *Spec) { s.Action = "shadow" },
		func(s *Spec) { s.Match = MatchSpec{Path: "/x"} },
		func(s *Spec) { s.Burst = 10 },                           // the default, spelled out
		func(s *Spec) { s.Segments = 1 },                         // the default, spelled out
		func(s *Spec) { s.Algorithm = "sliding_window_counter" }, // the default, spelled out
		func(s *Spec) { s.Rate = "10/1s" },
		func(s *Spec) { s.Key = nil }, // default: ip
	}
	for i, change := range same {
		s := base
		change(&s)
		if got := fp(s); got != fp(base) {
			t.Errorf("same[%d]: Fingerprint(%+v) = %q, want unchanged %q", i, s, got, fp(base))
		}
	}
	differ := []func(*Spec){
		func(s *Spec) { s.Rate = "11/s" },
		func(s *Spec) { s.Rate = "10/m" },
		func(s *Spec) { s.Algorithm, s.Burst = "token_bucket", 20 }, // a window refuses a burst
		func(s *Spec) { s.Segments = 2 },
		func(s *Spec) { s.Algorithm = "token_bucket" },
		func(s *Spec) { s.Key = []string{"header:X"} },
		func(s *Spec) { s.Key = []string{"ip", "method"} },
	}
	seen := map[string]int{fp(base): -1}
	for i, change := range differ {
		s := base
		change(&s)
		got := fp(s)
		if j, dup := seen[got]; dup {
			t.Errorf("differ[%d]: Fingerprint(%+v) = %q, same as case %d", i, s, got, j)
		}
		seen[got] = i
	}
}

// pinnedFingerprint is sha256("sliding_window_counter|10|1000000|10|1|ip")[:4] in hex:
// algorithm|rate|period µs|burst|segments|parts.
const pinnedFingerprint = "74c31e01"

func TestCompileDefaults(t *testing.T) {
	set := mustCompile(t,
		Spec{Name: "plain", Rate: "5/m"},
		Spec{Name: "delay", Rate: "5/s", Action: "delay"},
		Spec{Name: "delay-gcra", Rate: "5/s", Action: "delay", Algorithm: "gcra", MaxDelay: 3 * time.Second},
	)
	checks := []struct {
		name  string
		alg   sluice.Algorithm
		act   Action
		delay time.Duration
	}{
		{"plain", DefaultAlgorithm, Reject, 0},
		{"delay", sluice.LeakyBucket, Delay, DefaultMaxDelay},
		{"delay-gcra", sluice.GCRA, Delay, 3 * time.Second},
	}
	for _, c := range checks {
		r := set.Rule(c.name)
		if r.Algorithm != c.alg || r.Action != c.act || r.MaxDelay != c.delay || len(r.Key) != 1 || r.Key[0] != (Part{Kind: PartIP}) {
			t.Errorf("Rule(%q) = %v %v %v key %v, want %v %v %v [ip]", c.name, r.Algorithm, r.Action, r.MaxDelay, r.Key, c.alg, c.act, c.delay)
		}
	}
	if r := set.Rule("plain"); r.Limit != (sluice.Limit{Rate: 5, Period: time.Minute, Burst: 5, Segments: 1}) {
		t.Errorf("plain limit = %+v, want burst and segments defaulted", r.Limit)
	}
	if set.Rule("nope") != nil || (*Set)(nil).Rule("x") != nil {
		t.Error("Rule(unknown) != nil")
	}
}

func TestCompileErrors(t *testing.T) {
	specs := []Spec{
		{Name: "ok", Rate: "1/s", Line: 2},
		{Name: "bad name!", Rate: "1/s", Line: 5, Lines: map[string]int{"name": 5}},
		{Name: "a", Rate: "1/s", Line: 8, Key: []string{"ip", "nope"}, Lines: map[string]int{"key[1]": 10}},
		{Name: "ok", Rate: "x", Line: 12, Lines: map[string]int{"name": 12, "rate": 13}},
	}
	_, err := Compile("f.yaml", specs)
	var pes ParseErrors
	if !errors.As(err, &pes) {
		t.Fatalf("Compile error %T %v, want ParseErrors", err, err)
	}
	want := []string{
		`f.yaml:5: rules[1].name: "bad name!": use letters, digits, '-', '_' and '.' only`,
		`f.yaml:10: rules[2].key[1]: unknown key part "nope" (want ip, header:NAME, query:NAME, cookie:NAME, method or path)`,
		`f.yaml:12: rules[3].name: duplicate rule name "ok" (first used at line 2)`,
		`f.yaml:13: rules[3].rate: "x": want N/UNIT, such as 100/s or 5/m`,
	}
	if got := strings.Split(err.Error(), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Compile problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var pe *ParseError
	if !errors.As(err, &pe) || pe.Line != 5 {
		t.Errorf("errors.As(*ParseError) = %v, want the first problem", pe)
	}
	if got := (&ParseError{Msg: "m"}).Error(); got != "m" {
		t.Errorf("ParseError{Msg}.Error() = %q", got)
	}
	if got := (&ParseError{File: "f", Key: "k", Msg: "m"}).Error(); got != "f: k: m" {
		t.Errorf("ParseError{File,Key,Msg}.Error() = %q", got)
	}
}

func TestSetMatch(t *testing.T) {
	set := mustCompile(t,
		Spec{Name: "login", Rate: "5/m", Match: MatchSpec{Methods: []string{"POST"}, Path: "/login"}},
		Spec{Name: "api-key", Rate: "100/s", Match: MatchSpec{Path: "/api/*"}, Key: []string{"header:X-Api-Key"}},
		Spec{Name: "global", Rate: "1000/s"},
	)
	tests := []struct {
		req  *http.Request
		want []string // rule names, in order
	}{
		{request("POST", "/login"), []string{"login", "global"}},
		{request("GET", "/login"), []string{"global"}},
		{request("GET", "/api/v1/x", "X-Api-Key: k"), []string{"api-key", "global"}},
		{request("GET", "/api/v1/x"), []string{"global"}}, // no key header: api-key does not apply
	}
	var dst []Match
	for _, tt := range tests {
		dst = matchAll(t, set, tt.req, ip1)
		var got []string
		for _, m := range dst {
			got = append(got, m.Rule.Name)
			if !strings.HasPrefix(m.Key, m.Rule.Name+"|"+m.Rule.Fingerprint+"|") {
				t.Errorf("Match(%s %s): key %q lacks the rule's head", tt.req.Method, tt.req.URL, m.Key)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("Match(%s %s) = %v, want %v", tt.req.Method, tt.req.URL, got, tt.want)
		}
	}
	if got, err := (*Set)(nil).Match(request("GET", "/"), ip1, nil); len(got) != 0 || err != nil {
		t.Errorf("nil Set: Match = %v, %v", got, err)
	}
	// One allocation per matching rule: its key.
	req := request("POST", "/login")
	allocs := testing.AllocsPerRun(100, func() { dst, _ = set.Match(req, ip1, dst[:0]) })
	if allocs > 2 {
		t.Errorf("Match allocates %v times for 2 matching rules, want ≤ 2", allocs)
	}
}

func TestParseAction(t *testing.T) {
	for _, a := range []Action{Reject, Delay, Shadow, Defer} {
		got, err := ParseAction(a.String())
		if err != nil || got != a {
			t.Errorf("ParseAction(%q) = %v, %v", a.String(), got, err)
		}
	}
	if _, err := ParseAction("block"); err == nil {
		t.Error("ParseAction(block) = nil error")
	}
	if got := Action(9).String(); got != "Action(9)" {
		t.Errorf("Action(9).String() = %q", got)
	}
}

func BenchmarkSetMatch(b *testing.B) {
	set := mustCompile(b,
		Spec{Name: "login", Rate: "5/m", Match: MatchSpec{Methods: []string{"POST"}, Path: "/login"}},
		Spec{Name: "api-key", Rate: "100/s", Match: MatchSpec{Path: "/api/*"}, Key: []string{"header:X-Api-Key", "method"}},
		Spec{Name: "global", Rate: "1000/s"},
	)
	req := request("GET", "/api/v1/items?page=2", "X-Api-Key: 0123456789abcdef")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var dst []Match
		for pb.Next() {
			var err error
			dst, err = set.Match(req, ip1, dst[:0])
			if len(dst) != 2 || err != nil {
				b.Fatalf("Match: %d rules, want 2", len(dst))
			}
		}
	})
}

func ExampleSet_Match() {
	set, err := Compile("example.yaml", []Spec{
		{Name: "login-per-ip", Match: MatchSpec{Methods: []string{"POST"}, Path: "/login"}, Rate: "5/m"},
		{Name: "api-per-key", Match: MatchSpec{Path: "/api/*"}, Key: []string{"header:X-Api-Key"}, Rate: "100/s", Algorithm: "gcra"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	req := httptest.NewRequest("GET", "/api/orders", nil)
	req.Header.Set("X-Api-Key", "k-123")
	ms, _ := set.Match(req, netip.MustParseAddr("203.0.113.7"), nil)
	for _, m := range ms {
		fmt.Println(m.Rule.Name, m.Rule.Algorithm, m.Rule.Limit, strings.TrimPrefix(m.Key, m.Rule.Name+"|"+m.Rule.Fingerprint+"|"))
	}
	// Output:
	// api-per-key gcra 100/s k-123
}

// FuzzKeyFor checks that two requests get the same key from a two-part rule
// exactly when their values are the same, whatever the values contain, and
// that keys stay bounded.
func FuzzKeyFor(f *testing.F) {
	f.Add("x|y", "z", "x", "y|z")
	f.Add("1:x", "1:y", "1:x1:y", "1")
	f.Add("#a", "b", "a", "#b")
	f.Add(strings.Repeat("k", 300), "v", strings.Repeat("k", 299), "kv")
	two := mustCompile(f, Spec{Name: "r", Rate: "1/s", Key: []string{"header:A", "header:B"}}).Rules[0]
	one := mustCompile(f, Spec{Name: "s", Rate: "1/s", Key: []string{"header:A"}}).Rules[0]
	bound := len("r|") + 8 + len("|") + MaxKeyLen + 1
	f.Fuzz(func(t *testing.T, a1, b1, a2, b2 string) {
		if a1 == "" || b1 == "" || a2 == "" || b2 == "" {
			return
		}
		mk := func(a, b string) *http.Request {
			return &http.Request{Method: "GET", Header: http.Header{"A": {a}, "B": {b}}}
		}
		k1, ok1 := two.KeyFor(mk(a1, b1), ip1)
		k2, ok2 := two.KeyFor(mk(a2, b2), ip1)
		if !ok1 || !ok2 {
			t.Fatalf("KeyFor: ok %v %v for non-empty values", ok1, ok2)
		}
		if (k1 == k2) != (a1 == a2 && b1 == b2) {
			t.Fatalf("KeyFor(A=%q B=%q) = %q and KeyFor(A=%q B=%q) = %q", a1, b1, k1, a2, b2, k2)
		}
		s1, _ := one.KeyFor(mk(a1, b1), ip1)
		s2, _ := one.KeyFor(mk(a2, b2), ip1)
		if (s1 == s2) != (a1 == a2) {
			t.Fatalf("one part: KeyFor(A=%q) = %q and KeyFor(A=%q) = %q", a1, s1, a2, s2)
		}
		if len(k1) > bound || len(s1) > bound {
			t.Fatalf("keys %d and %d bytes long, bound %d", len(k1), len(s1), bound)
		}
	})
}

// queryValue reads a query as url.ParseQuery does (URL.Query().Get, what
// httplimit and a Go upstream read, and what httputil.ReverseProxy
// forwards): the first value of the first pair it keeps, and its
// different values (multi when there are several); and it calls ambiguous
// exactly a query with an alias of name (nameAlias), or a pair with a ';'
// that names either.
func FuzzQueryValue(f *testing.F) {
	f.Add("user=bob&x=1", "user")
	f.Add("x=1&user=b%20o+b&user=eve", "user")
	f.Add("user=%zz&user=eve", "user")
	f.Add("user=x;y&user=eve", "user")
	f.Add("x=1;y=2&user=eve", "user")
	f.Add("user+name=z&=v", "user name")
	f.Add("user=a&USER=b", "user")
	f.Add("user%5B%5D=a", "user")
	f.Fuzz(func(t *testing.T, raw, name string) {
		if name == "" || strings.Count(raw, "&") >= 1000 {
			return // no such part (ParsePart refuses it); url.ParseQuery's cap on parameters
		}
		want := ""
		vv, _ := url.ParseQuery(raw)
		if len(vv[name]) > 0 {
			want = vv[name][0]
		}
		var all []string
		got, multi, amb := queryValue(raw, name, &all)
		if !amb && got != want {
			t.Fatalf("queryValue(%q, %q) = %q, url.ParseQuery's first value %q", raw, name, got, want)
		}
		// Several values (the same one twice is not: every app reads it
		// alike) are multi, and all holds each once, in order, those not
		// empty, the first MaxKeysPerRule+1 of them (all a rule looks at);
		// names apps read as name are ambiguous.
		var distinct, kept []string
		for _, v := range vv[name] {
			if !slices.Contains(distinct, v) {
				distinct = append(distinct, v)
				if v != "" && len(kept) <= MaxKeysPerRule {
					kept = append(kept, v)
				}
			}
		}
		if !amb && multi != (len(distinct) > 1) {
			t.Fatalf("queryValue(%q, %q): multi %v, but url.ParseQuery reads %q", raw, name, multi, vv[name])
		}
		if !amb && !slices.Equal(all, kept) {
			t.Fatalf("queryValue(%q, %q): values %q, url.ParseQuery's %q", raw, name, all, kept)
		}
		if amb {
			alias := false
			for k := range vv {
				alias = alias || k != name && nameAlias(k, name)
			}
			for kv := range strings.SplitSeq(raw, "&") {
				alias = alias || strings.Contains(kv, ";") && semicolonNames(kv, name)
			}
			if !alias {
				t.Fatalf("queryValue(%q, %q): ambiguous, but url.ParseQuery reads %v", raw, name, vv)
			}
		}
	})
}

// TestCompileHorizon: a limit whose decisions would reach past 2^52 µs
// (see sluice.MaxHorizon) is refused at the key at fault, naming the bound:
// the rate for a period too long, the burst for one too large to refill.
func TestCompileHorizon(t *testing.T) {
	for _, tc := range []struct {
		spec Spec
		want string
	}{
		{Spec{Name: "a", Rate: "1/36500d", Line: 3, Lines: map[string]int{"rate": 4}}, `f.yaml:4: rules[0].rate: 1/36500d is too long: a decision could reach 146000 days ahead`},
		{Spec{Name: "a", Rate: "5/s", Burst: 1 << 40, Line: 3, Lines: map[string]int{"rate": 4, "burst": 5}}, `f.yaml:5: rules[0].burst: burst 1099511627776 is too large for 5/s: a decision could reach 5151416 days ahead`},
	} {
		_, err := Compile("f.yaml", []Spec{tc.spec})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "2^52 µs") {
			t.Errorf("Compile(rate %s, burst %d) = %v, want %q and the bound 2^52 µs", tc.spec.Rate, tc.spec.Burst, err, tc.want)
		}
	}
	if _, err := Compile("f.yaml", []Spec{{Name: "a", Rate: "1000/25000d", Line: 3}}); err != nil {
		t.Errorf("Compile(1000/25000d) = %v, want nil (about 137 years ahead at most)", err)
	}
}

// TestCompileLogRate: a sliding_window_log over sluice.MaxLogRate (one
// time kept per request counted) is refused at its rate, naming the bound.
func TestCompileLogRate(t *testing.T) {
	_, err := Compile("f.yaml", []Spec{{Name: "a", Rate: "2000000/h", Algorithm: "sliding_window_log", Line: 3, Lines: map[string]int{"rate": 4}}})
	if want := "f.yaml:4: rules[0].rate: rate 2000000 is too large for sliding_window_log (at most 1000000"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Compile(sliding_window_log 2000000/h) = %v, want %q", err, want)
	}
	for _, sp := range []Spec{{Name: "a", Rate: "1000000/h", Algorithm: "sliding_window_log"}, {Name: "b", Rate: "2000000/h", Algorithm: "sliding_window_counter"}} {
		if _, err := Compile("f.yaml", []Spec{sp}); err != nil {
			t.Errorf("Compile(%s %s) = %v, want nil", sp.Algorithm, sp.Rate, err)
		}
	}
}

// TestCompileBurstOnWindows: a window admits its rate each period whatever
// the burst, so a burst other than the rate on a window rule is refused at
// its line, naming the algorithms it applies to; left unsaid, it was
// accepted, shown as "(burst 10)" by serve and /v1/rules, and ignored. A
// burst equal to the rate (the default, written out) stays accepted.
func TestCompileBurstOnWindows(t *testing.T) {
	for _, alg := range []string{"fixed_window", "sliding_window_log", "sliding_window_counter", ""} {
		_, err := Compile("f.yaml", []Spec{{Name: "a", Rate: "5/m", Burst: 10, Algorithm: alg, Line: 3, Lines: map[string]int{"rate": 4, "burst": 5}}})
		shown := alg
		if shown == "" {
			shown = "sliding_window_counter"
		}
		if want := "f.yaml:5: rules[0].burst: 10 applies to token_bucket, gcra and leaky_bucket only: " + shown + " admits the rate, 5, each period"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Compile(%q 5/m burst 10) = %v, want %q", alg, err, want)
		}
		if _, err := Compile("f.yaml", []Spec{{Name: "a", Rate: "5/m", Burst: 5, Algorithm: alg}}); err != nil {
			t.Errorf("Compile(%q 5/m burst 5) = %v, want nil (the burst is the rate)", alg, err)
		}
	}
	for _, alg := range []string{"token_bucket", "gcra", "leaky_bucket"} {
		if _, err := Compile("f.yaml", []Spec{{Name: "a", Rate: "5/m", Burst: 10, Algorithm: alg}}); err != nil {
			t.Errorf("Compile(%s 5/m burst 10) = %v, want nil", alg, err)
		}
	}
}
