package httplimit_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// TestMiddlewareInvalidTime: a Limiter whose clock reads a time no store
// accepts (the zero time of a test clock never set, a time before 1970)
// is a bug in the caller, answered 500 under either policy like an
// invalid cost: never let through as a store outage, never counted.
func TestMiddlewareInvalidTime(t *testing.T) {
	for _, bad := range []time.Time{{}, time.Unix(-1, 0)} {
		lim, err := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.FixedWindow, sluice.PerMinute(1),
			sluice.WithClock(func() time.Time { return bad }))
		if err != nil {
			t.Fatal(err)
		}
		for _, policy := range []httplimit.ErrorPolicy{httplimit.FailOpen, httplimit.FailClosed} {
			var storeErrs atomic.Int64
			var logs logBuffer
			srv, hits := server(t, httplimit.Options{Limiter: lim, OnError: policy,
				Logger:       slog.New(slog.NewTextHandler(&logs, nil)),
				OnStoreError: func(*http.Request, error) { storeErrs.Add(1) }})
			for range 3 {
				resp, err := http.Get(srv.URL)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 500 || !strings.Contains(string(body), "invalid_time") {
					t.Errorf("clock %v, policy %d: status %d body %q, want 500 invalid_time", bad, policy, resp.StatusCode, body)
				}
			}
			if hits.Load() != 0 || storeErrs.Load() != 0 {
				t.Errorf("clock %v, policy %d: %d requests passed, %d store errors reported; want 0, 0", bad, policy, hits.Load(), storeErrs.Load())
			}
			if !strings.Contains(logs.String(), "time out of range") {
				t.Errorf("clock %v, policy %d: not logged: %q", bad, policy, logs.String())
			}
		}
	}
}

// TestMiddlewareZeroLimiter: a Limiter not built by NewLimiter can decide
// nothing; Middleware refuses it at once, as it refuses a nil one, rather
// than letting every request through as if its store had failed.
func TestMiddlewareZeroLimiter(t *testing.T) {
	good, err := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.FixedWindow, sluice.PerMinute(1))
	if err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string]httplimit.Options{
		"Limiter": {Limiter: new(sluice.Limiter)},
		"Rules":   {Limiter: good, Rules: []httplimit.Rule{{Name: "b", Limiter: new(sluice.Limiter)}}},
	} {
		func() {
			defer func() {
				if r := recover(); r == nil {
					t.Errorf("Middleware with a zero Limiter in %s did not panic", name)
				} else if !strings.Contains(r.(string), "NewLimiter") {
					t.Errorf("Middleware with a zero Limiter in %s panicked with %q, want it to name NewLimiter", name, r)
				}
			}()
			httplimit.Middleware(opts)
		}()
	}
	if d, _ := good.Allow(context.Background(), "k"); !d.Allowed {
		t.Error("good limiter refused its first request")
	}
}

// TestMiddlewareInvalidLimitFunc: a per-request limit the Limiter refuses
// (a zero Limit, a log longer than the algorithm keeps) is a bug in
// LimitFunc, answered 500 invalid_limit under either policy: never let
// through as a store outage, never counted under the Limiter's own limit.
func TestMiddlewareInvalidLimitFunc(t *testing.T) {
	for _, tc := range []struct {
		alg sluice.Algorithm
		bad sluice.Limit
	}{
		{sluice.FixedWindow, sluice.Limit{}},
		{sluice.TokenBucket, sluice.Every(-1, time.Second)},
		{sluice.SlidingWindowLog, sluice.PerSecond(sluice.MaxLogRate + 1)},
	} {
		lim, err := sluice.NewLimiter(memstore.New(memstore.Options{}), tc.alg, sluice.PerMinute(1))
		if err != nil {
			t.Fatal(err)
		}
		for _, policy := range []httplimit.ErrorPolicy{httplimit.FailOpen, httplimit.FailClosed} {
			var storeErrs atomic.Int64
			srv, hits := server(t, httplimit.Options{Limiter: lim, OnError: policy,
				LimitFunc:    func(*http.Request) (sluice.Limit, bool) { return tc.bad, true },
				Logger:       slog.New(slog.DiscardHandler),
				OnStoreError: func(*http.Request, error) { storeErrs.Add(1) }})
			for range 3 {
				resp, err := http.Get(srv.URL)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 500 || !strings.Contains(string(body), "invalid_limit") {
					t.Errorf("%s limit %+v, policy %d: status %d body %q, want 500 invalid_limit", tc.alg, tc.bad, policy, resp.StatusCode, body)
				}
			}
			if hits.Load() != 0 || storeErrs.Load() != 0 {
				t.Errorf("%s limit %+v, policy %d: %d requests passed, %d store errors reported; want 0, 0", tc.alg, tc.bad, policy, hits.Load(), storeErrs.Load())
			}
		}
		if d, _ := lim.Allow(context.Background(), "default:127.0.0.1"); !d.Allowed {
			t.Errorf("%s: the refused requests were counted under the Limiter's own limit", tc.alg)
		}
	}
}

// TestMiddlewareInvalidLogCut: the "invalid request" line quotes the
// request's key, which a client chooses (a header of up to net/http's
// 1 MB): it quotes at most MaxKeyLen bytes of it (a longer key is named by
// its digest), so no request makes a line longer than a few hundred bytes
// of its own, whatever bytes it sends.
func TestMiddlewareInvalidLogCut(t *testing.T) {
	lim, err := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.FixedWindow, sluice.PerMinute(1))
	if err != nil {
		t.Fatal(err)
	}
	for name, key := range map[string]string{
		"1 MB":             strings.Repeat("a", 1<<20),
		"MaxKeyLen+1":      strings.Repeat("a", httplimit.MaxKeyLen+1),
		"escapes":          strings.Repeat("\x01", httplimit.MaxKeyLen),
		"multi-byte runes": strings.Repeat("é", httplimit.MaxKeyLen/2),
	} {
		var logs logBuffer
		// A new middleware for each key: its log is throttled to a line a
		// second.
		srv, _ := server(t, httplimit.Options{Limiter: lim,
			KeyFunc: func(*http.Request) (string, bool) { return key, true },
			Cost:    func(*http.Request) int64 { return -1 },
			Logger:  slog.New(slog.NewTextHandler(&logs, nil))})
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 500 {
			t.Errorf("%s: status %d, want 500", name, resp.StatusCode)
		}
		lines := strings.Split(strings.TrimSuffix(logs.String(), "\n"), "\n")
		if len(lines) != 1 || !strings.Contains(lines[0], "invalid request") {
			t.Fatalf("%s: logged %d lines, want 1 invalid request line: %.300q", name, len(lines), logs.String())
		}
		// 256 bytes quoted twice (%q in the error, then the handler's
		// quoting) is at most 256×5 bytes; the rest of the line is ours.
		if n := len(lines[0]); n > 2048 {
			t.Errorf("%s: log line is %d bytes, want at most 2048: %.300q…", name, n, lines[0])
		}
		if strings.Contains(lines[0], strings.Repeat("a", httplimit.MaxKeyLen+1)) {
			t.Errorf("%s: log line quotes more than %d bytes of the key: %.300q…", name, httplimit.MaxKeyLen, lines[0])
		}
	}
}
