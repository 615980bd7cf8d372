package httplimit_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// TestKeyByHeaderHost: a limit per virtual host. net/http moves the Host
// header out of r.Header into r.Host, so reading r.Header["Host"] finds
// nothing and every request would pass uncounted.
func TestKeyByHeaderHost(t *testing.T) {
	lim := mustLimiter(t, memstore.New(memstore.Options{}), sluice.FixedWindow, sluice.PerMinute(1))
	srv, hits := server(t, httplimit.Options{Limiter: lim, Name: "per-host", KeyFunc: httplimit.KeyByHeader("host")})
	for i, want := range []struct {
		host   string
		status int
	}{{"a.example", 200}, {"a.example", 429}, {"b.example", 200}, {"b.example", 429}} {
		req, err := http.NewRequest("GET", srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = want.host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want.status || resp.Header.Get("X-RateLimit-Limit") != "1" {
			t.Errorf("request %d (Host %s): status %d, X-RateLimit-Limit %q; want %d, \"1\"", i, want.host, resp.StatusCode, resp.Header.Get("X-RateLimit-Limit"), want.status)
		}
	}
	if hits.Load() != 2 {
		t.Errorf("next handler reached %d times, want 2 (one per host)", hits.Load())
	}
}

// TestKeyByHeaderHostSpellings: a per-host limit counts the host as a
// server routes on it, as the daemon's header:Host does. net/http hands
// r.Host on as the client wrote it, and a handler serves
// "A.Example:8000" and "a.example." as "a.example": counted as written,
// each spelling was a fresh allowance of the one site's limit.
func TestKeyByHeaderHostSpellings(t *testing.T) {
	lim := mustLimiter(t, memstore.New(memstore.Options{}), sluice.FixedWindow, sluice.PerMinute(1))
	srv, hits := server(t, httplimit.Options{Limiter: lim, Name: "per-host", KeyFunc: httplimit.KeyByHeader("Host")})
	for i, host := range []string{"a.example", "A.Example", "a.example:8000", "a.example.", "A.EXAMPLE.:80", "b.example", "[2001:DB8::1]", "[2001:db8::1]:80"} {
		req, err := http.NewRequest("GET", srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := 429
		if i == 0 || host == "b.example" || host == "[2001:DB8::1]" {
			want = 200 // each site's first
		}
		if resp.StatusCode != want {
			t.Errorf("Host %q: %d, want %d", host, resp.StatusCode, want)
		}
	}
	if hits.Load() != 3 {
		t.Errorf("next handler reached %d times, want 3 (one per site)", hits.Load())
	}
	// The key function itself: the daemon's form.
	for host, want := range map[string]string{"Shop.Example.com:8000": "shop.example.com", "shop.example.com.": "shop.example.com", "[::1]:80": "[::1]"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Host = host
		if got, ok := httplimit.KeyByHeader("host")(r); !ok || got != want {
			t.Errorf("KeyByHeader(\"host\") of Host %q = %q, %v; want %q", host, got, ok, want)
		}
	}
}

// TestKeyByHeaderAuthorizationSpellings: a per-credential limit counts
// the credential, not its spelling. The handler's own r.BasicAuth reads
// "basic" as "Basic" and "MR==" as "MQ==" (bits past the last byte), so
// counted as written each spelling of one password was a fresh allowance.
func TestKeyByHeaderAuthorizationSpellings(t *testing.T) {
	lim := mustLimiter(t, memstore.New(memstore.Options{}), sluice.FixedWindow, sluice.PerMinute(1))
	var users sync.Map
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		users.Store(u+":"+p, ok)
	})
	srv := httptest.NewServer(httplimit.Middleware(httplimit.Options{Limiter: lim, Name: "per-cred", KeyFunc: httplimit.KeyByHeader("Authorization")})(next))
	t.Cleanup(srv.Close)
	for i, auth := range []string{"Basic dXNlcjpwYXNzMQ==", "basic dXNlcjpwYXNzMQ==", "BASIC dXNlcjpwYXNzMR==", "Basic dXNlcjpwYXNzMR==",
		"Bearer tok", "bearer tok", "BEARER tok"} {
		req, err := http.NewRequest("GET", srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", auth)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := 429
		if i == 0 || i == 4 { // each credential's first
			want = 200
		}
		if resp.StatusCode != want {
			t.Errorf("Authorization %q: %d, want %d", auth, resp.StatusCode, want)
		}
	}
	n := 0
	users.Range(func(k, v any) bool { n++; return true })
	if _, ok := users.Load("user:pass1"); !ok || n != 2 {
		t.Errorf("the handler saw %d credentials, want user:pass1 and the bearer's empty one", n)
	}
}

// keyStore records the keys a store is asked about.
type keyStore struct {
	sluice.Store
	mu   sync.Mutex
	keys []string
}

func (s *keyStore) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	s.mu.Lock()
	s.keys = append(s.keys, r.Key)
	s.mu.Unlock()
	return s.Store.Take(ctx, r)
}

func (s *keyStore) TakeAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	s.mu.Lock()
	for _, r := range rs {
		s.keys = append(s.keys, r.Key)
	}
	s.mu.Unlock()
	return s.Store.TakeAll(ctx, rs, ds)
}

// TestLongKeysAreBounded: a key taken from the request (a header of up to
// net/http's 1 MB) is not kept raw, or every request could pin a megabyte
// in the store until its state is at rest. A long key is kept as its
// digest, and still counts apart from every other key.
func TestLongKeysAreBounded(t *testing.T) {
	st := &keyStore{Store: memstore.New(memstore.Options{})}
	lim := mustLimiter(t, st, sluice.FixedWindow, sluice.PerMinute(1))
	h := httplimit.Middleware(httplimit.Options{Limiter: lim, Name: "k", KeyFunc: httplimit.KeyByHeader("X-Key")})(
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	long := strings.Repeat("a", 100_000)
	sum := sha256.Sum256([]byte(long))
	for i, c := range []struct {
		key    string
		status int
	}{
		{long, 200}, {long, 429},
		{long[:len(long)-1] + "b", 200},         // another long key: its own count
		{"#" + hex.EncodeToString(sum[:]), 200}, // a short key spelled like a digest
		{"#" + hex.EncodeToString(sum[:]), 429},
		{"short", 200}, {"short", 429},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-Key", c.key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.status {
			t.Errorf("request %d (key of %d bytes): status %d, want %d", i, len(c.key), w.Code, c.status)
		}
	}
	for _, k := range st.keys {
		if len(k) > len("k:#")+httplimit.MaxKeyLen {
			t.Errorf("store asked about a key of %d bytes, want at most %d", len(k), len("k:#")+httplimit.MaxKeyLen)
		}
	}
}

// TestRuleNamesCannotMeet: rules on one Limiter count apart by name, even
// when a name holds the ":" that ends it in the store key. Rule "api" keyed
// by a header a client writes must not reach rule "api:v2"'s counts.
func TestRuleNamesCannotMeet(t *testing.T) {
	lim := mustLimiter(t, memstore.New(memstore.Options{}), sluice.FixedWindow, sluice.PerMinute(1))
	h := httplimit.Middleware(httplimit.Options{Rules: []httplimit.Rule{
		{Name: "api", Limiter: lim, KeyFunc: httplimit.KeyByHeader("X-Key")},
		{Name: "api:v2", Limiter: lim, KeyFunc: httplimit.KeyByHeader("X-User")},
	}})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	do := func(header, value string) int {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set(header, value)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	if got := do("X-Key", "v2:victim"); got != 200 {
		t.Fatalf("rule api, key v2:victim: status %d, want 200", got)
	}
	if got := do("X-User", "victim"); got != 200 {
		t.Errorf("rule api:v2, key victim, after rule api counted key v2:victim: status %d, want 200 (the rules count apart)", got)
	}
	if got := do("X-User", "victim"); got != 429 {
		t.Errorf("rule api:v2, key victim, a second time: status %d, want 429", got)
	}
}

// TestKeyByPathIsCanonical: a per-route limit keyed by KeyByPath is not
// sidestepped by spelling the path another way that a router serves
// alike, as the daemon's path key part is not: one key for all of these.
func TestKeyByPathIsCanonical(t *testing.T) {
	for _, target := range []string{"/login", "/login/", "//login", "/a/../login", "/./login", "/login;jsessionid=1", "/%6Cogin", "/login%2F"} {
		r := httptest.NewRequest("POST", target, nil)
		if key, ok := httplimit.KeyByPath(r); key != "/login" || !ok {
			t.Errorf("KeyByPath(%s) = %q, %v; want \"/login\", true", target, key, ok)
		}
	}
}

// KeyByQuery counts the value a Go handler reads: the first of the
// parameter's values as url.ParseQuery reads them, which is what
// r.URL.Query().Get and r.FormValue (without a form body) return. A
// client sending ?api_key=victim&api_key=mine, or a pair with a ';', is
// counted under the key the handler then serves it as, never under one
// while the handler reads another.
func TestKeyByQueryCountsWhatGoReads(t *testing.T) {
	lim := mustLimiter(t, memstore.New(memstore.Options{}), sluice.FixedWindow, sluice.PerMinute(1))
	var mu sync.Mutex
	var read []string // what the handler read, per request it served
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if q, f := r.URL.Query().Get("api_key"), r.FormValue("api_key"); q != f {
			t.Errorf("%s: URL.Query().Get %q, FormValue %q", r.URL, q, f)
		}
		read = append(read, r.URL.Query().Get("api_key"))
	})
	srv := httptest.NewServer(httplimit.Middleware(httplimit.Options{Limiter: lim, Name: "k", KeyFunc: httplimit.KeyByQuery("api_key")})(next))
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		query string
		key   string // what the handler reads, and so the count it spends
	}{
		{"api_key=victim&api_key=mine", "victim"},
		{"api_key=mine&api_key=victim", "mine"},
		{"x=1;api_key=a&api_key=b", "b"},   // the ';' pair is dropped
		{"api_key=c%20d&api_key=e", "c d"}, // decoded
	} {
		mu.Lock()
		read = nil
		mu.Unlock()
		for i := range 2 {
			resp := get(t, srv.URL+"/?"+tc.query, nil)
			if want := []int{200, 429}[i]; resp.StatusCode != want {
				t.Errorf("?%s, request %d: %d, want %d", tc.query, i, resp.StatusCode, want)
			}
		}
		mu.Lock()
		if len(read) != 1 || read[0] != tc.key {
			t.Errorf("?%s: the handler read %q, want %q", tc.query, read, tc.key)
		}
		mu.Unlock()
		// Its count is the one the handler's key spends.
		if resp := get(t, srv.URL+"/?api_key="+url.QueryEscape(tc.key), nil); resp.StatusCode != 429 {
			t.Errorf("?%s counted %q, then ?api_key=%s: %d, want 429 (one count)", tc.query, tc.key, tc.key, resp.StatusCode)
		}
	}
}
