package httplimit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

func TestSetHeaders(t *testing.T) {
	for _, tc := range []struct {
		name   string
		d      sluice.Decision
		policy string
		alg    sluice.Algorithm // 0: a decision of no known algorithm
		limit  sluice.Limit
		want   map[string]string
	}{
		{
			name:   "allowed",
			d:      sluice.Decision{Allowed: true, Limit: 10, Remaining: 3, ResetAfter: 1500 * time.Millisecond},
			policy: "login", limit: sluice.PerMinute(10),
			want: map[string]string{"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "3", "X-RateLimit-Reset": "2",
				"RateLimit-Policy": `"login";q=10;w=60`, "RateLimit": `"login";r=3;t=2`},
		},
		{
			name:   "denied: t is the retry-after",
			d:      sluice.Decision{Allowed: false, Limit: 5, Remaining: 0, RetryAfter: 12*time.Second + 1, ResetAfter: 60 * time.Second},
			policy: "api", limit: sluice.PerMinute(5),
			want: map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "60",
				"RateLimit": `"api";r=0;t=13`},
		},
		{
			name:   "denied forever: t falls back to the reset",
			d:      sluice.Decision{Allowed: false, Limit: 5, RetryAfter: sluice.Never, ResetAfter: 4 * time.Second},
			policy: "api", limit: sluice.PerSecond(5),
			want: map[string]string{"RateLimit": `"api";r=0;t=4`, "RateLimit-Policy": `"api";q=5;w=1`},
		},
		{
			name:   "sub-second period rounds the window up to 1",
			d:      sluice.Decision{Allowed: true, Remaining: 2},
			policy: "fast", limit: sluice.Every(3, 250*time.Millisecond),
			want: map[string]string{"RateLimit-Policy": `"fast";q=3;w=1`, "X-RateLimit-Reset": "0", "RateLimit": `"fast";r=2;t=0`},
		},
		{
			name:   "the longest Duration rounds up, never to a negative",
			d:      sluice.Decision{Allowed: false, RetryAfter: math.MaxInt64, ResetAfter: math.MaxInt64},
			policy: "p", limit: sluice.PerDay(1),
			want: map[string]string{"X-RateLimit-Reset": "9223372037", "RateLimit": `"p";r=0;t=9223372037`},
		},
		{
			name:   "policy name escaped as an sf-string",
			d:      sluice.Decision{Allowed: true, Remaining: 1},
			policy: "a\"b\\c\né", limit: sluice.PerHour(7),
			want: map[string]string{"RateLimit-Policy": `"a\"b\\c___";q=7;w=3600`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			h.Set("RateLimit", "stale")
			httplimit.SetHeaders(h, tc.d, tc.policy, tc.alg, tc.limit)
			for k, want := range tc.want {
				if got := h.Values(k); len(got) != 1 || got[0] != want {
					t.Errorf("SetHeaders(%+v, %q): %s = %q, want [%q]", tc.d, tc.policy, k, got, want)
				}
			}
		})
	}
}

func TestWriteLimited(t *testing.T) {
	for _, tc := range []struct {
		d          sluice.Decision
		wantRetry  string
		wantMillis int64
	}{
		{sluice.Decision{RetryAfter: 1500 * time.Millisecond}, "2", 1500},
		{sluice.Decision{RetryAfter: time.Microsecond}, "1", 1},
		{sluice.Decision{RetryAfter: 3 * time.Second}, "3", 3000},
		// A denied answer never says "now", in seconds or in milliseconds:
		// retry_after_ms 0 beside Retry-After: 1 invited an immediate retry.
		{sluice.Decision{RetryAfter: 0}, "1", 1},
		{sluice.Decision{RetryAfter: sluice.Never, ResetAfter: 10 * time.Second}, "10", 10000},
		// A cost over what a fresh key's limit can ever admit: nothing to
		// reset (ResetAfter 0).
		{sluice.Decision{RetryAfter: sluice.Never}, "1", 1},
		// The longest wait a Duration holds rounds up, not over into a negative.
		{sluice.Decision{RetryAfter: math.MaxInt64}, "9223372037", 9223372036855},
	} {
		rec := httptest.NewRecorder()
		httplimit.WriteLimited(rec, "r<1>", tc.d)
		if rec.Code != 429 {
			t.Errorf("WriteLimited(%v): status %d, want 429", tc.d.RetryAfter, rec.Code)
		}
		if got := rec.Header().Get("Retry-After"); got != tc.wantRetry {
			t.Errorf("WriteLimited(%v): Retry-After %q, want %q", tc.d.RetryAfter, got, tc.wantRetry)
		}
		if got := rec.Header().Values("X-RateLimit-Retry-After"); len(got) != 1 || got[0] != tc.wantRetry {
			t.Errorf("WriteLimited(%v): X-RateLimit-Retry-After %q, want [%q] (as Retry-After)", tc.d.RetryAfter, got, tc.wantRetry)
		}
		var body struct {
			Error        string `json:"error"`
			Rule         string `json:"rule"`
			RetryAfterMS *int64 `json:"retry_after_ms"`
		}
		dec := json.NewDecoder(rec.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil {
			t.Fatalf("WriteLimited(%v): body does not decode: %v", tc.d.RetryAfter, err)
		}
		if body.Error != "rate_limited" || body.Rule != "r<1>" || body.RetryAfterMS == nil || *body.RetryAfterMS != tc.wantMillis {
			t.Errorf("WriteLimited(%v): body %+v, want rate_limited, r<1>, %d", tc.d.RetryAfter, body, tc.wantMillis)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("WriteLimited: Content-Type %q", ct)
		}
	}
}

// server runs the middleware in a real loopback server in front of a
// handler that counts its hits.
func server(t *testing.T, opts httplimit.Options) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, "ok")
	})
	srv := httptest.NewServer(httplimit.Middleware(opts)(next))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func get(t *testing.T, url string, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func TestMiddlewareOverLoopback(t *testing.T) {
	lim, err := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.SlidingWindowLog, sluice.PerHour(3))
	if err != nil {
		t.Fatal(err)
	}
	srv, hits := server(t, httplimit.Options{
		Limiter: lim, Name: "per-user",
		KeyFunc: func(r *http.Request) (string, bool) {
			u := r.Header.Get("X-User")
			return u, u != ""
		},
	})
	for i, want := range []struct {
		user      string
		status    int
		remaining string
	}{
		{"ann", 200, "2"}, {"ann", 200, "1"}, {"ann", 200, "0"}, {"ann", 429, "0"}, {"ann", 429, "0"},
		{"bob", 200, "2"},
		{"", 200, ""}, // no key: not limited, no headers
	} {
		resp := get(t, srv.URL, map[string]string{"X-User": want.user})
		if resp.StatusCode != want.status || resp.Header.Get("X-RateLimit-Remaining") != want.remaining {
			t.Errorf("request %d (user %q): status %d remaining %q, want %d %q", i, want.user,
				resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"), want.status, want.remaining)
		}
		if want.status == 429 && (resp.Header.Get("Retry-After") == "" || resp.Header.Get("X-RateLimit-Retry-After") != resp.Header.Get("Retry-After")) {
			t.Errorf("request %d: 429 with Retry-After %q and X-RateLimit-Retry-After %q, want both, equal", i, resp.Header.Get("Retry-After"), resp.Header.Get("X-RateLimit-Retry-After"))
		}
		if want.status == 200 && resp.Header.Get("X-RateLimit-Retry-After") != "" {
			t.Errorf("request %d: allowed answer carries X-RateLimit-Retry-After %q", i, resp.Header.Get("X-RateLimit-Retry-After"))
		}
	}
	if got := hits.Load(); got != 5 {
		t.Errorf("next handler hits = %d, want 5 (denied requests must not reach it)", got)
	}
}

// downStore is a store whose backend is down: every call fails as
// redisstore does when Redis does not answer.
type downStore struct{}

func (downStore) Take(context.Context, sluice.Request) (sluice.Decision, error) {
	return sluice.Decision{}, fmt.Errorf("test store: %w: connection refused", sluice.ErrStoreUnavailable)
}

func (downStore) TakeAll(context.Context, []sluice.Request, []sluice.Decision) error {
	return fmt.Errorf("test store: %w: connection refused", sluice.ErrStoreUnavailable)
}

// logBuffer collects slog records.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestMiddlewareOnError(t *testing.T) {
	lim, err := sluice.NewLimiter(downStore{}, sluice.TokenBucket, sluice.PerSecond(10))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		policy   httplimit.ErrorPolicy
		status   int
		wantHits int64
		wantLog  string
	}{
		{httplimit.FailOpen, 200, 3, "failing open"},
		{httplimit.FailClosed, 503, 0, "failing closed"},
	} {
		var seen atomic.Int64
		var logs logBuffer
		srv, hits := server(t, httplimit.Options{Limiter: lim, OnError: tc.policy,
			Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			OnStoreError: func(_ *http.Request, err error) {
				if errors.Is(err, sluice.ErrStoreUnavailable) {
					seen.Add(1)
				}
			}})
		for range 3 {
			resp := get(t, srv.URL, nil)
			if resp.StatusCode != tc.status || resp.Header.Get("X-RateLimit-Limit") != "" {
				t.Errorf("OnError %d: status %d, X-RateLimit-Limit %q; want %d and no headers", tc.policy, resp.StatusCode, resp.Header.Get("X-RateLimit-Limit"), tc.status)
			}
		}
		if hits.Load() != tc.wantHits || seen.Load() != 3 {
			t.Errorf("OnError %d: hits %d, OnStoreError calls %d; want %d, 3", tc.policy, hits.Load(), seen.Load(), tc.wantHits)
		}
		// Logged by default, at most once a second: one record for three
		// failures within a second (unless the second turned in between).
		if n := strings.Count(logs.String(), tc.wantLog); n < 1 || n > 2 {
			t.Errorf("OnError %d: %d log records %q, want 1 (at most 2); log:\n%s", tc.policy, n, tc.wantLog, logs.String())
		}
	}
}

// TestMiddlewareNegativeCost: an invalid cost is a bug, answered 500 under
// either policy, never let through as a store outage, never counted.
func TestMiddlewareNegativeCost(t *testing.T) {
	lim, err := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.FixedWindow, sluice.PerMinute(1))
	if err != nil {
		t.Fatal(err)
	}
	for _, policy := range []httplimit.ErrorPolicy{httplimit.FailOpen, httplimit.FailClosed} {
		var storeErrs atomic.Int64
		var logs logBuffer
		srv, hits := server(t, httplimit.Options{Limiter: lim, OnError: policy,
			Cost:         func(r *http.Request) int64 { return -1 },
			Logger:       slog.New(slog.NewTextHandler(&logs, nil)),
			OnStoreError: func(*http.Request, error) { storeErrs.Add(1) }})
		for range 5 {
			resp, err := http.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 500 || !strings.Contains(string(body), "invalid_cost") {
				t.Errorf("policy %d: status %d body %q, want 500 invalid_cost", policy, resp.StatusCode, body)
			}
		}
		if hits.Load() != 0 || storeErrs.Load() != 0 {
			t.Errorf("policy %d: %d requests passed, %d store errors reported; want 0, 0", policy, hits.Load(), storeErrs.Load())
		}
		if !strings.Contains(logs.String(), "invalid cost") {
			t.Errorf("policy %d: not logged: %q", policy, logs.String())
		}
	}
	if d, _ := lim.Allow(context.Background(), "default:127.0.0.1"); !d.Allowed {
		t.Error("the refused requests were counted")
	}
}

// The leaky bucket shapes: a burst of 4 at one instant leaves 250ms apart.
func TestMiddlewareLeakyBucketShapes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim, err := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.LeakyBucket, sluice.PerSecond(4).WithBurst(3))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var mu sync.Mutex
		var passed []time.Duration
		next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			passed = append(passed, time.Since(start))
			mu.Unlock()
		})
		h := httplimit.Middleware(httplimit.Options{Limiter: lim})(next)
		codes := make([]int, 5)
		done := make(chan bool)
		for i := range 5 {
			go func() {
				req := httptest.NewRequest("GET", "/", nil)
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				codes[i] = rec.Code
				done <- true
			}()
			synctest.Wait() // take the slots in order
		}
		for range 5 {
			<-done
		}
		want := []time.Duration{0, 250 * time.Millisecond, 500 * time.Millisecond, 750 * time.Millisecond}
		if len(passed) != len(want) {
			t.Fatalf("passed at %v, want %v", passed, want)
		}
		for i := range want {
			if passed[i] != want[i] {
				t.Errorf("request %d passed at %v, want %v", i, passed[i], want[i])
			}
		}
		if codes[4] != 429 {
			t.Errorf("5th request of the burst: status %d, want 429 (queue of 3 full)", codes[4])
		}
	})
}

// noRefundStore hides every optional method of its store, Refunder among
// them: a store of one's own with Take and TakeAll only.
type noRefundStore struct{ sluice.Store }

// A client that goes away while its request waits out its Delay never
// reaches the handler, and gives its place in the queue back (the store
// has Refunder): the next request takes it. It used to keep the place,
// and the next request queued behind it, as it still does on a store
// without Refunder.
func TestMiddlewareLeakyBucketClientGone(t *testing.T) {
	for _, c := range []struct {
		name  string
		store sluice.Store
		want  []time.Duration
	}{
		{"memstore", memstore.New(memstore.Options{}), []time.Duration{0, 250 * time.Millisecond}},
		{"no Refunder", noRefundStore{memstore.New(memstore.Options{})}, []time.Duration{0, 500 * time.Millisecond}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lim := mustLimiter(t, c.store, sluice.LeakyBucket, sluice.PerSecond(4).WithBurst(3))
				start := time.Now()
				var passed []time.Duration
				h := httplimit.Middleware(httplimit.Options{Limiter: lim})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
					passed = append(passed, time.Since(start))
				}))
				h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil)) // leaves at once
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				defer cancel()
				h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil).WithContext(ctx)) // its place leaves at 250ms
				// At 100ms, the next request takes the gone one's place,
				// or queues behind it.
				h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
				if fmt.Sprint(passed) != fmt.Sprint(c.want) {
					t.Errorf("%s: handler reached at %v, want %v (the second client left during its delay)", c.name, passed, c.want)
				}
			})
		})
	}
}

// With several rules, a client gone during its Delay gives back only the
// leaky bucket place that has not left: the other rules keep its count.
func TestMiddlewareClientGoneKeepsOtherCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New(memstore.Options{})
		shaped := mustLimiter(t, s, sluice.LeakyBucket, sluice.PerSecond(4).WithBurst(3))
		hourly := mustLimiter(t, s, sluice.FixedWindow, sluice.PerHour(100))
		all := func(*http.Request) (string, bool) { return "k", true }
		start := time.Now()
		var passed []time.Duration
		h := httplimit.Middleware(httplimit.Options{Rules: []httplimit.Rule{
			{Name: "shaped", Limiter: shaped, KeyFunc: all},
			{Name: "hourly", Limiter: hourly, KeyFunc: all},
		}})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			passed = append(passed, time.Since(start))
		}))
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil)) // leaves at once
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil).WithContext(ctx)) // its place leaves at 250ms
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
		if want := []time.Duration{0, 250 * time.Millisecond}; fmt.Sprint(passed) != fmt.Sprint(want) {
			t.Errorf("handler reached at %v, want %v (the gone client's place taken by the next)", passed, want)
		}
		if d, err := hourly.AllowN(context.Background(), "hourly:k", 0); err != nil || d.Remaining != 97 {
			t.Errorf("hourly rule after 3 requests, one gone: %+v, %v; want 97 remaining (the gone one counted)", d, err)
		}
	})
}

func TestKeyByRemoteIP(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"192.0.2.1:1234", "192.0.2.1"}, {"[::ffff:192.0.2.1]:1234", "192.0.2.1"},
		{"[2001:db8::1]:80", "2001:db8::/64"}, {"[2001:db8::ffff:1]:80", "2001:db8::/64"},
		{"[2001:db8:0:1::1]:80", "2001:db8:0:1::/64"}, {"unix", "unix"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tc.addr
		r.Header.Set("X-Forwarded-For", "6.6.6.6")
		if got, ok := httplimit.KeyByRemoteIP(r); got != tc.want || !ok {
			t.Errorf("KeyByRemoteIP(%q) = %q, %v; want %q, true", tc.addr, got, ok, tc.want)
		}
	}
}

func BenchmarkMiddleware(b *testing.B) {
	lim, _ := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.GCRA, sluice.PerSecond(1<<40))
	h := httplimit.Middleware(httplimit.Options{Limiter: lim})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req := httptest.NewRequest("GET", "/", nil)
		for pb.Next() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
		}
	})
}

// BenchmarkThreeLimits: per IP, per API key and per route decided by one
// middleware (one TakeAll) against three stacked middlewares (three
// store calls, the outer headers overwritten by the inner ones).
func BenchmarkThreeLimits(b *testing.B) {
	store := memstore.New(memstore.Options{})
	lim := func(name string) *sluice.Limiter {
		l, _ := sluice.NewLimiter(store, sluice.GCRA, sluice.PerSecond(1<<40), sluice.WithName(name))
		return l
	}
	ip, key, route := lim("ip"), lim("key"), lim("route")
	byKey := httplimit.KeyByHeader("X-Api-Key")
	byRoute := httplimit.Keys(httplimit.KeyByRemoteIP, httplimit.KeyByPath)
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	for _, c := range []struct {
		name string
		h    http.Handler
	}{
		{"one-middleware", httplimit.Middleware(httplimit.Options{Limiter: ip, Name: "ip", Rules: []httplimit.Rule{
			{Name: "key", Limiter: key, KeyFunc: byKey}, {Name: "route", Limiter: route, KeyFunc: byRoute}}})(ok)},
		{"stacked", httplimit.Middleware(httplimit.Options{Limiter: ip, Name: "ip"})(
			httplimit.Middleware(httplimit.Options{Limiter: key, Name: "key", KeyFunc: byKey})(
				httplimit.Middleware(httplimit.Options{Limiter: route, Name: "route", KeyFunc: byRoute})(ok)))},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				req := httptest.NewRequest("GET", "/v1/items", nil)
				req.Header.Set("X-Api-Key", "k1")
				for pb.Next() {
					c.h.ServeHTTP(httptest.NewRecorder(), req)
				}
			})
		})
	}
}
