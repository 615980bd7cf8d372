package rules

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"runtime"
	"strings"
	"testing"
)

func TestCanonicalPath(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "/"},
		{"/", "/"},
		{"//", "/"},
		{"/login", "/login"},
		{"/login/", "/login"},
		{"/login//", "/login"},
		{"//login", "/login"},
		{"/login;x", "/login"},
		{"/login;jsessionid=ABC", "/login"},
		{"/login;", "/login"},
		{"/login/;x", "/login"},
		{"/a;x/b;y=1", "/a/b"},
		{"/%6Cogin", "/login"},
		{"/%6cogin", "/login"},
		{"/login%2f", "/login"},
		{"/login%2F", "/login"},
		{"/%2Flogin", "/login"},
		{"/%256Cogin", "/login"},   // double encoding decoded too
		{"/%25256Cogin", "/login"}, // and triple
		{"/%252F..%252Fadmin", "/admin"},
		{"/login%3Bx", "/login"}, // an encoded ; is a ; too
		{"/login%3bx/y", "/login/y"},
		{"/./login", "/login"},
		{"/a/../login", "/login"},
		{"/a/b/../../login", "/login"},
		{"/../login", "/login"}, // .. at the root stays at the root
		{"/../../../login", "/login"},
		{"/%2e%2e/login", "/login"},
		{"/x/%2E/login", "/x/login"},
		{"/x/..;/login", "/login"}, // Tomcat's ..;
		{"/x/.;a/login", "/x/login"},
		{"/x/..", "/"},
		{"/x/.", "/x"},
		{"\\login", "/login"},
		{"/admin\\..\\login", "/login"},
		{"/login%5C", "/login"},
		{"/100%", "/100%"}, // an invalid escape stays
		{"/a%zzb", "/a%zzb"},
		{"/a%2", "/a%2"},
		{"/%%34%31", "/A"},   // decoding makes a new escape: decoded too
		{"/%2%34%31", "/$1"}, // "%34" → "4" ends "%24" → "$"
		{"/Login", "/Login"}, // case kept
		{"/caf%C3%A9", "/café"},
		{"/a b", "/a b"},
		{"/a\x00b", "/a\x00b"},
		{"login", "/login"},
		{"*", "/*"},
	}
	for _, tt := range tests {
		if got := CanonicalPath(tt.in); got != tt.want {
			t.Errorf("CanonicalPath(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if got := CanonicalPath(CanonicalPath(tt.in)); got != CanonicalPath(tt.in) {
			t.Errorf("CanonicalPath(CanonicalPath(%q)) = %q, not idempotent", tt.in, got)
		}
	}
}

func TestFoldedPath(t *testing.T) {
	tests := []struct{ in, want string }{
		{"/login", "/login"},
		{"/Login", "/login"},
		{"/LOGIN/", "/login"},
		{"/%4Cogin", "/login"},
		{"/\u212Aey", "/key"},       // Kelvin sign folds with k
		{"/\u017Fecret", "/secret"}, // long s folds with s
		{"/CAF%C3%89", "/café"},
		{"/a\xffB", "/a\xffb"}, // invalid UTF-8 kept
	}
	for _, tt := range tests {
		if got := FoldedPath(tt.in); got != tt.want {
			t.Errorf("FoldedPath(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestPathSpellings: after /login is spent, no other spelling of it gets
// through: every one matches the rule and counts on the same key.
func TestPathSpellings(t *testing.T) {
	set := mustCompile(t,
		Spec{Name: "login", Rate: "1/m", Match: MatchSpec{Methods: []string{"POST"}, Path: "/login"}, Key: []string{"ip", "path"}},
		Spec{Name: "admin", Rate: "1/m", Match: MatchSpec{Path: "/admin/*", CaseInsensitive: true}, Key: []string{"path"}},
	)
	ip := netip.MustParseAddr("192.0.2.1")
	keyOf := func(target, rule string) (string, bool) {
		req := httptest.NewRequest("POST", "http://x"+target, nil)
		for _, m := range matchAll(t, set, req, ip) {
			if m.Rule.Name == rule {
				return m.Key, true
			}
		}
		return "", false
	}
	base, ok := keyOf("/login", "login")
	if !ok {
		t.Fatal("POST /login: rule login does not apply")
	}
	for _, sp := range []string{
		"/login/", "/login;x", "/login;jsessionid=1", "/%6Cogin", "/login%2f", "/login%2F",
		"//login", "/./login", "/a/../login", "/x/..;/login", "/%2e%2e/login", "/login%3bx",
		"/%256Cogin", "/login/.", "/login//", "/%5Clogin", "/login?x=1",
	} {
		k, ok := keyOf(sp, "login")
		if !ok || k != base {
			t.Errorf("POST %s: rule login applies %v with key %q, want key %q", sp, ok, k, base)
		}
	}
	for _, sp := range []string{"/Login", "/logins", "/login/x", "/logi"} {
		if _, ok := keyOf(sp, "login"); ok {
			t.Errorf("POST %s: rule login applies to a different path", sp)
		}
	}
	abase, ok := keyOf("/admin/users", "admin")
	if !ok {
		t.Fatal("/admin/users: rule admin does not apply")
	}
	for _, sp := range []string{"/Admin/Users", "/ADMIN/users/", "/admin;x/users", "/%41dmin/users", "/admin//users", "/x/../admin/USERS"} {
		k, ok := keyOf(sp, "admin")
		if !ok || k != abase {
			t.Errorf("%s: rule admin applies %v with key %q, want key %q", sp, ok, k, abase)
		}
	}
	for _, sp := range []string{"/admin", "/ADMIN/", "/admin;x"} {
		if _, ok := keyOf(sp, "admin"); !ok {
			t.Errorf("%s: prefix rule /admin/* does not apply", sp)
		}
	}
	if _, ok := keyOf("/adminx", "admin"); ok {
		t.Error("/adminx: prefix rule /admin/* applies")
	}
}

func TestCanonicalPathNoAlloc(t *testing.T) {
	p := "/api/v1/orders/12345"
	if n := testing.AllocsPerRun(100, func() { _ = CanonicalPath(p); _ = FoldedPath(p) }); n != 0 {
		t.Errorf("CanonicalPath of a canonical path: %v allocations, want 0", n)
	}
}

// A request path as long as net/http admits (a request line of 1 MiB),
// made of many short segments that are kept but not canonical, is read in
// memory of the order of its length: the decoded path, the canonical one
// and the result, at most four times its size for each reading. A slice
// of every kept segment's start, 8 bytes for each two of the path, grown
// as it went, took 13 times its size ("/a;b" repeated: 26 MB for the
// two readings of one request).
func TestCanonicalPathMemoryBounded(t *testing.T) {
	for _, p := range []string{
		strings.Repeat("/a;b", 1<<20/4),
		strings.Repeat("/a", 1<<20/2) + "/",
		strings.Repeat("/ab/..", 1<<20/6) + "/a",
	} {
		for _, fold := range []bool{false, true} {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			if fold {
				FoldedPath(p)
			} else {
				CanonicalPath(p)
			}
			runtime.ReadMemStats(&after)
			if got, limit := after.TotalAlloc-before.TotalAlloc, 4*uint64(len(p)); got > limit {
				t.Errorf("path %q… of %d bytes (fold %v): %d bytes allocated, want at most %d", p[:12], len(p), fold, got, limit)
			}
		}
	}
}

// The segment view of a path as long as net/http admits is built in
// memory of the order of its length too: a list of every segment and a
// decoded copy of each took 5 to 15 times its size ("%2e%2e/" and "/./"
// repeated to a megabyte, 10 MB a request through forward auth), under
// twice it now.
func TestSegmentViewMemoryBounded(t *testing.T) {
	for _, p := range []string{
		"/" + strings.Repeat("%2e%2e/", 1<<20/7),
		strings.Repeat("/a%2Fb", 1<<20/6),
		strings.Repeat("/./", 1<<20/3),
	} {
		for _, fold := range []bool{false, true} {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, ok := segmentView(p, fold)
			runtime.ReadMemStats(&after)
			if !ok {
				t.Fatalf("path %q…: no segment view", p[:12])
			}
			if got, limit := after.TotalAlloc-before.TotalAlloc, 3*uint64(len(p)); got > limit {
				t.Errorf("path %q… of %d bytes (fold %v): segmentView allocated %d bytes, want at most %d", p[:12], len(p), fold, got, limit)
			}
		}
	}
}

// FuzzCanonicalPath checks that canonicalisation is idempotent, that the
// one-pass check agrees with the full one, and that any spelling derived
// from a path by the rules of CanonicalPath (escapes, ;parameters, dot
// segments, repeated and trailing slashes, case for a folding rule) counts
// on the same key as the path itself.
func FuzzCanonicalPath(f *testing.F) {
	f.Add("/login", []byte{0, 1, 2, 3})
	f.Add("/api/v1/x", []byte{7, 7, 7})
	f.Add("/%2541", []byte{})
	f.Add("/a;b/../c//", []byte{5, 200, 13})
	f.Add("/\u212Aey/\u017F", []byte{9, 3})
	set := mustCompile(f,
		Spec{Name: "p", Rate: "1/s", Key: []string{"path"}},
		Spec{Name: "f", Rate: "1/s", Key: []string{"path"}, Match: MatchSpec{CaseInsensitive: true}},
	)
	f.Fuzz(func(t *testing.T, p string, ops []byte) {
		c := CanonicalPath(p)
		if CanonicalPath(c) != c {
			t.Fatalf("CanonicalPath(%q) = %q, and of that %q", p, c, CanonicalPath(c))
		}
		if isCanonical(p, false) && canonicalSlow(p, false) != p {
			t.Fatalf("isCanonical(%q) but the full form is %q", p, canonicalSlow(p, false))
		}
		fc := FoldedPath(p)
		if FoldedPath(fc) != fc || FoldedPath(c) != fc {
			t.Fatalf("FoldedPath(%q) = %q, of that %q, of CanonicalPath %q", p, fc, FoldedPath(fc), FoldedPath(c))
		}
		if !strings.HasPrefix(c, "/") || (len(c) > 1 && strings.HasSuffix(c, "/")) {
			t.Fatalf("CanonicalPath(%q) = %q", p, c)
		}
		// Respell the canonical path and check both count on one key.
		alt := respell(c, ops)
		if CanonicalPath(alt) != c {
			t.Fatalf("respelled %q as %q: canonical %q", c, alt, CanonicalPath(alt))
		}
		k1, k2 := keysOf(t, set, c), keysOf(t, set, alt)
		if k1 != k2 {
			t.Fatalf("paths %q and %q (same canonical form) count on %q and %q", c, alt, k1, k2)
		}
	})
}

func keysOf(t *testing.T, set *Set, path string) string {
	req := &http.Request{Method: "GET", URL: &url.URL{Path: path}, Header: http.Header{}}
	var b strings.Builder
	for _, m := range matchAll(t, set, req, ip1) {
		b.WriteString(m.Key)
		b.WriteByte(' ')
	}
	return b.String()
}

// respell writes canonical path c another way, choosing by ops: each byte
// picks a change at a position. Every change keeps the canonical form.
func respell(c string, ops []byte) string {
	segs := strings.Split(c[1:], "/")
	if c == "/" {
		segs = nil
	}
	var b strings.Builder
	for i, s := range segs {
		var op byte
		if i < len(ops) {
			op = ops[i]
		}
		b.WriteByte('/')
		switch op % 8 {
		case 1:
			b.WriteString("/") // repeated slash
		case 2:
			b.WriteString("./")
		case 3:
			b.WriteString("zz/../")
		case 4:
			b.WriteString("\\")
		}
		for j := 0; j < len(s); j++ {
			if op&0x10 != 0 && (j+int(op))%3 == 0 {
				b.WriteString("%")
				b.WriteString(strings.ToUpper(hex2(s[j])))
			} else if op&0x20 != 0 && s[j] == '%' {
				b.WriteString("%25")
			} else {
				b.WriteByte(s[j])
			}
		}
		switch op % 8 {
		case 5:
			b.WriteString(";x=1")
		case 6:
			b.WriteString(";")
		}
	}
	if len(ops) > len(segs) && ops[len(segs)]%2 == 1 {
		b.WriteString("/")
	}
	if b.Len() == 0 {
		return "//"
	}
	return b.String()
}

func hex2(c byte) string {
	const h = "0123456789abcdef"
	return string([]byte{h[c>>4], h[c&15]})
}

func BenchmarkCanonicalPath(b *testing.B) {
	for _, p := range []string{"/api/v1/orders/12345", "/api//v1/./orders;jsessionid=1/%31%32345/", "/API/V1/Orders/12345"} {
		b.Run("canonical/"+p, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = CanonicalPath(p)
			}
		})
		b.Run("folded/"+p, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = FoldedPath(p)
			}
		})
	}
}

// FuzzPrefixAsServeMux: a request that Go's ServeMux serves from its
// "/api/" handler (its routing reads the path as sent, segment by segment)
// is matched by a rule for "/api/*", whatever its spelling; and one it
// serves from its "/login" handler by a rule for "/login".
func FuzzPrefixAsServeMux(f *testing.F) {
	for _, s := range []string{"/api/x", "/api/%2E%2E/x", "/api/..%2Fx", "/x/../api/y", "/%61pi/x", "/api", "/login", "/%6Cogin", "/api%2Fx"} {
		f.Add(s)
	}
	set := mustCompile(f,
		Spec{Name: "api", Rate: "1/s", Match: MatchSpec{Path: "/api/*"}},
		Spec{Name: "login", Rate: "1/s", Match: MatchSpec{Path: "/login"}},
	)
	var served string
	mux := http.NewServeMux()
	mux.HandleFunc("/api/", func(http.ResponseWriter, *http.Request) { served = "api" })
	mux.HandleFunc("/login", func(http.ResponseWriter, *http.Request) { served = "login" })
	mux.HandleFunc("/", func(http.ResponseWriter, *http.Request) { served = "" })
	f.Fuzz(func(t *testing.T, target string) {
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET " + target + " HTTP/1.1\r\nHost: x\r\n\r\n")))
		if err != nil || req.URL.Path == "" || req.URL.Path[0] != '/' {
			return // net/http's server refuses it, or no path to route
		}
		served = "-"
		mux.ServeHTTP(httptest.NewRecorder(), req)
		if served == "-" || served == "" {
			return // redirected (a path ServeMux cleans first), or not served by either
		}
		for _, m := range matchAll(t, set, req, ip1) {
			if m.Rule.Name == served {
				return
			}
		}
		t.Fatalf("ServeMux serves %q from its %q handler; the rule for it does not match", target, served)
	})
}
