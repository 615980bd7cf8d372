package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

func mustLimiter(t *testing.T, s sluice.Store, alg sluice.Algorithm, l sluice.Limit, opts ...sluice.Option) *sluice.Limiter {
	t.Helper()
	lim, err := sluice.NewLimiter(s, alg, l, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// oneStore returns a maker of limiters on one memstore and one clock that
// stands at sluicetest.T0: the rules of one middleware, or of middlewares
// stacked, share a store as a deployment's do.
func oneStore(t *testing.T) func(sluice.Algorithm, sluice.Limit) *sluice.Limiter {
	store := memstore.New(memstore.Options{})
	clk := sluicetest.NewClock(sluicetest.T0)
	return func(alg sluice.Algorithm, l sluice.Limit) *sluice.Limiter {
		t.Helper()
		return mustLimiter(t, store, alg, l, sluice.WithClock(clk.Now))
	}
}

// TestSeveralRules: per IP 5/min and per API key 2/min in one middleware,
// one store call per request. A request denied by the key's limit consumes
// nothing from the IP's; the headers are the tightest rule's.
func TestSeveralRules(t *testing.T) {
	limiter := oneStore(t)
	perIP := limiter(sluice.FixedWindow, sluice.PerMinute(5))
	perKey := limiter(sluice.FixedWindow, sluice.PerMinute(2))
	var hits int
	h := httplimit.Middleware(httplimit.Options{
		Limiter: perIP, Name: "ip",
		Rules: []httplimit.Rule{{Name: "key", Limiter: perKey, KeyFunc: httplimit.KeyByHeader("X-API-Key")}},
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits++ }))
	do := func(apiKey string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "192.0.2.1:1234"
		if apiKey != "" {
			r.Header.Set("X-API-Key", apiKey)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	for i, want := range []struct {
		key, policy, remaining string
		status                 int
	}{
		{"k1", `"key";q=2;w=60`, "1", 200}, // ip 4 left, key 1: key is tighter
		{"k1", `"key";q=2;w=60`, "0", 200}, // ip 3, key 0
		{"k1", `"key";q=2;w=60`, "0", 429}, // denied by key: ip not charged
		{"k1", `"key";q=2;w=60`, "0", 429},
		{"", `"ip";q=5;w=60`, "2", 200}, // no API key: only the ip rule applies
		{"k2", `"ip";q=5;w=60`, "1", 200},
		{"k2", `"ip";q=5;w=60`, "0", 200},
		{"k2", `"ip";q=5;w=60`, "0", 429}, // denied by ip: k2 not charged
	} {
		w := do(want.key)
		if w.Code != want.status || w.Header().Get("RateLimit-Policy") != want.policy || w.Header().Get("X-RateLimit-Remaining") != want.remaining {
			t.Errorf("request %d (key %q): %d %s remaining %s; want %d %s remaining %s", i, want.key,
				w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("X-RateLimit-Remaining"), want.status, want.policy, want.remaining)
		}
	}
	if hits != 5 {
		t.Errorf("handler reached %d times, want 5", hits)
	}
	// A new API key from the exhausted IP is denied by the ip rule and
	// keeps its whole allowance.
	if w := do("k3"); w.Code != 429 {
		t.Fatalf("k3 from the exhausted IP: %d, want 429", w.Code)
	}
	if d, _ := perKey.Allow(context.Background(), "key:k3"); !d.Allowed || d.Remaining != 1 {
		t.Errorf("k3's own count after the denial: %+v, want allowed with 1 remaining (nothing consumed)", d)
	}
}

// TestPerPlanLimits: one Limiter, the limit chosen per request.
func TestPerPlanLimits(t *testing.T) {
	limiter := oneStore(t)
	lim := limiter(sluice.FixedWindow, sluice.PerHour(1))
	plans := map[string]sluice.Limit{"pro": sluice.PerHour(3)}
	h := httplimit.Middleware(httplimit.Options{
		Limiter: lim, Name: "plan", KeyFunc: httplimit.KeyByHeader("X-User"),
		LimitFunc: func(r *http.Request) (sluice.Limit, bool) {
			l, ok := plans[r.Header.Get("X-Plan")]
			return l, ok
		},
	})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	count := func(user, plan string) (admitted int, limit string) {
		for range 5 {
			r := httptest.NewRequest("GET", "/", nil)
			r.Header.Set("X-User", user)
			r.Header.Set("X-Plan", plan)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code == 200 {
				admitted++
			}
			limit = w.Header().Get("X-RateLimit-Limit")
		}
		return admitted, limit
	}
	if n, l := count("free-user", "free"); n != 1 || l != "1" {
		t.Errorf("free plan: %d admitted, limit %s; want 1, 1", n, l)
	}
	if n, l := count("pro-user", "pro"); n != 3 || l != "3" {
		t.Errorf("pro plan: %d admitted, limit %s; want 3, 3", n, l)
	}
}

func TestRulesOnDifferentStoresPanic(t *testing.T) {
	a := mustLimiter(t, memstore.New(memstore.Options{}), sluice.GCRA, sluice.PerSecond(1))
	b := mustLimiter(t, memstore.New(memstore.Options{}), sluice.GCRA, sluice.PerSecond(1))
	defer func() {
		if recover() == nil {
			t.Error("no panic for rules on two stores")
		}
	}()
	httplimit.Middleware(httplimit.Options{Limiter: a, Rules: []httplimit.Rule{{Limiter: b}}})
}

func TestKeyFuncs(t *testing.T) {
	r := httptest.NewRequest("GET", "/v1/items?tenant=acme&empty=", nil)
	r.RemoteAddr = "10.0.0.7:5000" // a trusted proxy
	r.Header.Set("X-Api-Key", "k1")
	r.Header.Add("X-Api-Key", "k2")
	r.Header.Set("X-Forwarded-For", "203.0.113.9, 10.0.0.8")
	r.AddCookie(&http.Cookie{Name: "session", Value: "s-42"})
	trusted := clientip.Resolver{Trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	for _, c := range []struct {
		name string
		f    httplimit.KeyFunc
		key  string
		ok   bool
	}{
		{"header", httplimit.KeyByHeader("x-api-key"), "k1", true},
		{"missing header", httplimit.KeyByHeader("Authorization"), "", false},
		{"query", httplimit.KeyByQuery("tenant"), "acme", true},
		{"empty query", httplimit.KeyByQuery("empty"), "", false},
		{"cookie", httplimit.KeyByCookie("session"), "s-42", true},
		{"missing cookie", httplimit.KeyByCookie("other"), "", false},
		{"remote ip", httplimit.KeyByRemoteIP, "10.0.0.7", true},
		{"client ip", httplimit.KeyByClientIP(trusted, clientip.Prefixes{}), "203.0.113.9", true},
		{"client ip /24", httplimit.KeyByClientIP(trusted, clientip.Prefixes{IPv4: 24}), "203.0.113.0/24", true},
		{"untrusted", httplimit.KeyByClientIP(clientip.Resolver{}, clientip.Prefixes{}), "10.0.0.7", true},
		{"path", httplimit.KeyByPath, "/v1/items", true},
		{"composite", httplimit.Keys(httplimit.KeyByHeader("X-Api-Key"), httplimit.KeyByPath), "2:k19:/v1/items", true},
		{"composite, one missing", httplimit.Keys(httplimit.KeyByHeader("X-Api-Key"), httplimit.KeyByCookie("other")), "", false},
	} {
		if key, ok := c.f(r); key != c.key || ok != c.ok {
			t.Errorf("%s: (%q, %v), want (%q, %v)", c.name, key, ok, c.key, c.ok)
		}
	}
	// Composite keys cannot be confused by values holding the separator.
	a := httptest.NewRequest("GET", "/", nil)
	a.Header.Set("A", "x:1")
	a.Header.Set("B", "y")
	b := httptest.NewRequest("GET", "/", nil)
	b.Header.Set("A", "x")
	b.Header.Set("B", "1:y")
	k := httplimit.Keys(httplimit.KeyByHeader("A"), httplimit.KeyByHeader("B"))
	if ka, _ := k(a); ka == func() string { kb, _ := k(b); return kb }() {
		t.Errorf("composite keys collide: %q", ka)
	}
}

// A KeyFunc that panics reaches net/http's recovery as it is, and leaves no
// count behind: every rule is keyed before any is taken, so the rules
// keyed before the panic have taken nothing.
func TestPanickingKeyFuncTakesNothing(t *testing.T) {
	limiter := oneStore(t)
	perIP := limiter(sluice.FixedWindow, sluice.PerMinute(5))
	perKey := limiter(sluice.FixedWindow, sluice.PerMinute(2))
	boom := func(*http.Request) (string, bool) { panic("boom") }
	h := httplimit.Middleware(httplimit.Options{
		Limiter: perIP, Name: "ip",
		Rules: []httplimit.Rule{{Name: "key", Limiter: perKey, KeyFunc: boom}},
	})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("the handler was reached") }))
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.1:1234"
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Errorf("recovered %v, want the KeyFunc's panic", p)
			}
		}()
		h.ServeHTTP(httptest.NewRecorder(), r)
	}()
	if d, _ := perIP.Allow(context.Background(), "ip:192.0.2.1"); !d.Allowed || d.Remaining != 4 {
		t.Errorf("the ip rule's count after the panic: %+v, want 4 remaining (nothing taken)", d)
	}
}
