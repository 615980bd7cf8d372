package httplimit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// Two requests a minute per client IP; the third gets 429.
func ExampleMiddleware() {
	// A fixed clock makes the output reproducible; leave WithClock out in
	// real code.
	now := time.Date(2026, 1, 1, 12, 0, 30, 0, time.UTC)
	limiter, err := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.FixedWindow, sluice.PerMinute(2),
		sluice.WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello\n")
	})
	h := httplimit.Middleware(httplimit.Options{Limiter: limiter, Name: "per-ip"})(hello)

	for range 3 {
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = "192.0.2.7:51000"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header().Get("X-RateLimit-Remaining"), rec.Header().Get("RateLimit"))
		fmt.Print(rec.Body.String())
	}
	// Output:
	// 200 1 "per-ip";r=1;t=30
	// hello
	// 200 0 "per-ip";r=0;t=30
	// hello
	// 429 0 "per-ip";r=0;t=30
	// {"error":"rate_limited","rule":"per-ip","retry_after_ms":30000}
}

func ExampleSetHeaders() {
	h := http.Header{}
	d := sluice.Decision{Allowed: true, Limit: 100, Remaining: 41, ResetAfter: 36200 * time.Millisecond}
	httplimit.SetHeaders(h, d, "api", sluice.FixedWindow, sluice.PerMinute(100))
	for _, k := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit"} {
		fmt.Printf("%s: %s\n", k, h.Get(k))
	}
	// Output:
	// X-RateLimit-Limit: 100
	// X-RateLimit-Remaining: 41
	// X-RateLimit-Reset: 37
	// RateLimit-Policy: "api";q=100;w=60
	// RateLimit: "api";r=41;t=37
}

// Per API key: 3 requests a minute per X-API-Key; requests without the
// header are not counted by this rule (give them a per-IP rule).
func ExampleKeyByHeader() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	lim, _ := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.SlidingWindowLog, sluice.PerMinute(3),
		sluice.WithClock(func() time.Time { return now }))
	h := httplimit.Middleware(httplimit.Options{
		Limiter: lim, Name: "per-key", KeyFunc: httplimit.KeyByHeader("X-API-Key"),
	})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, key := range []string{"k1", "k1", "k2", "k1", "k1", ""} {
		req := httptest.NewRequest("GET", "/", nil)
		if key != "" {
			req.Header.Set("X-API-Key", key)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Printf("%q: %d remaining=%q\n", key, rec.Code, rec.Header().Get("X-RateLimit-Remaining"))
	}
	// Output:
	// "k1": 200 remaining="2"
	// "k1": 200 remaining="1"
	// "k2": 200 remaining="2"
	// "k1": 200 remaining="0"
	// "k1": 429 remaining="0"
	// "": 200 remaining=""
}

// Several limits in one middleware, decided in one store call: 100 a
// minute per client IP and 5 a minute per IP on /login. The headers carry
// the tightest limit; a request denied by one limit costs nothing in the
// others.
func ExampleOptions_rules() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := sluice.WithClock(func() time.Time { return now })
	store := memstore.New(memstore.Options{})
	perIP, _ := sluice.NewLimiter(store, sluice.GCRA, sluice.PerMinute(100), clock)
	login, _ := sluice.NewLimiter(store, sluice.FixedWindow, sluice.PerMinute(5), sluice.WithName("login"), clock)
	loginOnly := func(r *http.Request) (string, bool) {
		if r.URL.Path != "/login" {
			return "", false
		}
		return httplimit.KeyByRemoteIP(r)
	}
	h := httplimit.Middleware(httplimit.Options{
		Limiter: perIP, Name: "ip",
		Rules: []httplimit.Rule{{Name: "login", Limiter: login, KeyFunc: loginOnly}},
	})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, path := range []string{"/", "/login", "/login", "/login", "/login", "/login", "/login", "/"} {
		req := httptest.NewRequest("POST", path, nil)
		req.RemoteAddr = "192.0.2.7:51000"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Println(path, rec.Code, rec.Header().Get("RateLimit"))
	}
	// Output:
	// / 200 "ip";r=99;t=1
	// /login 200 "login";r=4;t=60
	// /login 200 "login";r=3;t=60
	// /login 200 "login";r=2;t=60
	// /login 200 "login";r=1;t=60
	// /login 200 "login";r=0;t=60
	// /login 429 "login";r=0;t=60
	// / 200 "ip";r=93;t=1
}

// Behind a load balancer: count the client it forwards for, believing
// X-Forwarded-For only from the balancer's addresses.
func ExampleKeyByClientIP() {
	res := clientip.Resolver{Trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	key := httplimit.KeyByClientIP(res, clientip.Prefixes{})

	viaLB := httptest.NewRequest("GET", "/", nil)
	viaLB.RemoteAddr = "10.0.0.5:40000"
	viaLB.Header.Set("X-Forwarded-For", "198.51.100.23")
	spoofed := httptest.NewRequest("GET", "/", nil)
	spoofed.RemoteAddr = "203.0.113.9:40000" // not the balancer
	spoofed.Header.Set("X-Forwarded-For", "198.51.100.23")
	v6 := httptest.NewRequest("GET", "/", nil)
	v6.RemoteAddr = "[2001:db8:1:2:3:4:5:6]:40000"

	for _, r := range []*http.Request{viaLB, spoofed, v6} {
		k, _ := key(r)
		fmt.Println(k)
	}
	// Output:
	// 198.51.100.23
	// 203.0.113.9
	// 2001:db8:1:2::/64
}

// Checking by hand, in a handler of your own (a gRPC gateway, a job
// queue): the same headers and 429 answer as the middleware.
func Example_byHand() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	lim, _ := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.TokenBucket, sluice.PerSecond(10).WithBurst(20),
		sluice.WithClock(func() time.Time { return now }))
	handler := func(w http.ResponseWriter, r *http.Request) {
		d, err := lim.AllowN(r.Context(), "tenant:acme", 15) // this call costs 15
		if err != nil {
			http.Error(w, "rate limiter unavailable", http.StatusServiceUnavailable)
			return
		}
		httplimit.SetHeaders(w.Header(), d, "tenant", lim.Algorithm(), lim.Limit())
		if !d.Allowed {
			httplimit.WriteLimited(w, "tenant", d)
			return
		}
		io.WriteString(w, "done\n")
	}
	for range 2 {
		rec := httptest.NewRecorder()
		handler(rec, httptest.NewRequest("POST", "/batch", nil))
		fmt.Printf("%d limit=%s remaining=%s retry-after=%q\n", rec.Code, rec.Header().Get("X-RateLimit-Limit"), rec.Header().Get("X-RateLimit-Remaining"), rec.Header().Get("Retry-After"))
		fmt.Print(rec.Body.String())
	}
	// Output:
	// 200 limit=10 remaining=5 retry-after=""
	// done
	// 429 limit=10 remaining=5 retry-after="1"
	// {"error":"rate_limited","rule":"tenant","retry_after_ms":1000}
}
