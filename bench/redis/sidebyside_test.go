package main

// The same per-IP middleware (10 requests a minute per client IP, 429
// past it) written with Sluice, go-chi/httprate, go-redis/redis_rate and
// golang.org/x/time/rate, each run in a real loopback server (Redis-backed
// ones against a real redis-server) and sent the same 12 requests. The
// test asserts what docs/library.md's side-by-side reports: every one
// admits exactly 10, and which headers and body each sends.
//
//	cd bench/redis && go test -run SideBySide -v .

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/httprate"
	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// --- Sluice, in process (swap memstore for redisstore: one line) ---

func sluiceMiddleware() func(http.Handler) http.Handler {
	lim, err := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.GCRA, sluice.PerMinute(10))
	if err != nil {
		panic(err)
	}
	return httplimit.Middleware(httplimit.Options{Limiter: lim, Name: "per-ip"})
}

// --- Sluice on Redis ---

func sluiceRedisMiddleware(addr string) func(http.Handler) http.Handler {
	store, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{addr}, RedisTime: true})
	if err != nil {
		panic(err)
	}
	lim, err := sluice.NewLimiter(store, sluice.GCRA, sluice.PerMinute(10))
	if err != nil {
		panic(err)
	}
	return httplimit.Middleware(httplimit.Options{Limiter: lim, Name: "per-ip"})
}

// --- go-chi/httprate ---

func httprateMiddleware() func(http.Handler) http.Handler {
	return httprate.LimitBy(10, time.Minute, func(r *http.Request) (string, error) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		return httprate.CanonicalizeIP(host), err
	})
}

// --- go-redis/redis_rate ---

func redisRateMiddleware(addr string) func(http.Handler) http.Handler {
	limiter := redis_rate.NewLimiter(redis.NewClient(&redis.Options{Addr: addr}))
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			host, _, _ := net.SplitHostPort(r.RemoteAddr)
			res, err := limiter.Allow(r.Context(), "ip:"+host, redis_rate.PerMinute(10))
			if err != nil {
				next.ServeHTTP(w, r) // fail open, silently
				return
			}
			w.Header().Set("X-RateLimit-Remaining", strconv.Itoa(res.Remaining))
			if res.Allowed == 0 {
				w.Header().Set("Retry-After", strconv.Itoa(int(res.RetryAfter/time.Second)+1))
				http.Error(w, "rate limited", http.StatusTooManyRequests)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// --- golang.org/x/time/rate ---

func xrateMiddleware() func(http.Handler) http.Handler {
	var mu sync.Mutex
	limiters := map[string]*rate.Limiter{} // grows forever: no eviction
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			host, _, _ := net.SplitHostPort(r.RemoteAddr)
			mu.Lock()
			l, ok := limiters[host]
			if !ok {
				l = rate.NewLimiter(rate.Every(6*time.Second), 10)
				limiters[host] = l
			}
			mu.Unlock()
			if !l.Allow() {
				http.Error(w, "rate limited", http.StatusTooManyRequests)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// answer is what one request got.
type answer struct {
	status  int
	headers []string // the rate-limit headers, "Name: value", sorted by name
	body    string
}

var shown = []string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Ratelimit-Policy", "Ratelimit", "Retry-After", "X-Ratelimit-Retry-After", "Content-Type"}

func run(t *testing.T, mw func(http.Handler) http.Handler, n int) []answer {
	t.Helper()
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })))
	defer srv.Close()
	var out []answer
	for range n {
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		a := answer{status: resp.StatusCode, body: strings.TrimSpace(string(body))}
		for _, h := range shown {
			if v := resp.Header.Get(h); v != "" {
				a.headers = append(a.headers, h+": "+v)
			}
		}
		out = append(out, a)
	}
	return out
}

func TestSideBySide(t *testing.T) {
	srv := redistest.StartServer(t)
	for _, c := range []struct {
		name string
		mw   func(http.Handler) http.Handler
	}{
		{"sluice (memstore)", sluiceMiddleware()},
		{"sluice (redisstore)", sluiceRedisMiddleware(srv.Addr)},
		{"go-chi/httprate", httprateMiddleware()},
		{"go-redis/redis_rate", redisRateMiddleware(srv.Addr)},
		{"x/time/rate", xrateMiddleware()},
	} {
		t.Run(c.name, func(t *testing.T) {
			as := run(t, c.mw, 12)
			admitted := 0
			for _, a := range as {
				if a.status == 200 {
					admitted++
				}
			}
			if admitted != 10 || as[10].status != 429 || as[11].status != 429 {
				t.Errorf("admitted %d of 12 (statuses %v), want the first 10", admitted, as)
			}
			var b strings.Builder
			fmt.Fprintf(&b, "%s: first answer %d %v\n", c.name, as[0].status, as[0].headers)
			fmt.Fprintf(&b, "%s: 11th answer %d %v body %q\n", c.name, as[10].status, as[10].headers, as[10].body)
			t.Log(b.String())
			if strings.HasPrefix(c.name, "sluice") {
				if len(as[0].headers) < 5 || len(as[10].headers) < 7 {
					t.Errorf("sluice headers: %v / %v, want the full set", as[0].headers, as[10].headers)
				}
			}
		})
	}
}
