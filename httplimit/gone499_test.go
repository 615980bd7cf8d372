package httplimit_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// hangGuard bounds the waits below for something that should happen at
// once (a goroutine to run, a socket to be read): a hung test fails
// instead of running for ever. It is no threshold on how long anything takes.
const hangGuard = 2 * time.Minute

// gateStore is a memory store (Refunder and all) that says when a Take
// has begun and, if hold is set, holds it until its context ends, as a
// Redis store whose answer has not come yet: the client can go away
// before the decision.
type gateStore struct {
	*memstore.Store
	hold   bool
	inTake chan struct{} // a Take has begun
	taken  chan struct{} // a Take has decided (not held)
}

func newGateStore(hold bool) *gateStore {
	return &gateStore{Store: memstore.New(memstore.Options{}), hold: hold,
		inTake: make(chan struct{}, 16), taken: make(chan struct{}, 16)}
}

func (s *gateStore) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	s.inTake <- struct{}{}
	if s.hold {
		<-ctx.Done()
		return sluice.Decision{}, ctx.Err()
	}
	d, err := s.Store.Take(ctx, r)
	s.taken <- struct{}{}
	return d, err
}

// logged is what an access-log middleware wrapped around the limiter
// records of one request: its status (200 if none was written, as
// net/http sends) and its rate-limit headers.
type logged struct {
	status int
	limit  string
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// goneServer serves the middleware over lim behind an access-log
// middleware that reports each request's status on the channel returned,
// in front of a handler counting its hits.
func goneServer(t *testing.T, lim *sluice.Limiter) (*httptest.Server, <-chan logged, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	log := make(chan logged, 16)
	mw := httplimit.Middleware(httplimit.Options{Limiter: lim, OnError: httplimit.FailOpen,
		KeyFunc: func(*http.Request) (string, bool) { return "k", true }})
	inner := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, "ran")
	}))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		inner.ServeHTTP(sw, r)
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		log <- logged{status: sw.status, limit: w.Header().Get(httplimit.HeaderLimit)}
	}))
	t.Cleanup(srv.Close)
	return srv, log, &hits
}

func recv[T any](t *testing.T, what string, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(hangGuard):
		t.Fatalf("%s: nothing within %v", what, hangGuard)
		panic("unreachable")
	}
}

// goneCase is one way for a request's client to go away: before the store
// answers (hold), or while it waits out its leaky bucket Delay.
type goneCase struct {
	name string
	hold bool
	// reached is what to wait for before the client leaves.
	reached func(s *gateStore) <-chan struct{}
}

var goneCases = []goneCase{
	{"before the decision", true, func(s *gateStore) <-chan struct{} { return s.inTake }},
	{"during the delay", false, func(s *gateStore) <-chan struct{} { return s.taken }},
}

// setupGone returns a limiter on a gate store: under hold every Take
// waits for its client to leave; otherwise a leaky bucket of 1/min whose
// first request is already taken, so the next one waits out a minute's
// Delay.
func setupGone(t *testing.T, c goneCase) (*gateStore, *sluice.Limiter) {
	s := newGateStore(c.hold)
	lim := mustLimiter(t, s, sluice.LeakyBucket, sluice.PerMinute(1).WithBurst(5))
	if !c.hold {
		if d, err := lim.AllowN(context.Background(), "default:k", 1); err != nil || !d.Allowed || d.Delay != 0 {
			t.Fatalf("first request: %+v, %v", d, err)
		}
	}
	return s, lim
}

// checkGone checks what was recorded of a request whose client went away:
// 499 without rate-limit headers, the handler never run, and under the
// leaky bucket its place given back (the next request waits a minute, not
// two).
func checkGone(t *testing.T, c goneCase, lim *sluice.Limiter, log <-chan logged, hits *atomic.Int64) {
	t.Helper()
	got := recv(t, "the access log", log)
	if got.status != httplimit.StatusClientClosedRequest || got.limit != "" {
		t.Errorf("%s: access log recorded status %d, X-RateLimit-Limit %q; want 499 and no rate-limit headers", c.name, got.status, got.limit)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("%s: the next handler ran %d times for a gone client", c.name, n)
	}
	if c.hold {
		return
	}
	if d, err := lim.AllowN(context.Background(), "default:k", 1); err != nil || !d.Allowed || d.Delay > time.Minute {
		t.Errorf("%s: the next request: %+v, %v; want a Delay of at most 1m (the gone client's place given back)", c.name, d, err)
	}
}

// TestMiddlewareClientGone499: a request whose client cancels it before
// the store answers, or while it waits out its Delay, is recorded as 499
// by the access log wrapped around the middleware, not as the 200 net/http
// writes for a handler that wrote nothing; it never reaches the handler and
// takes nothing (its leaky bucket place is given back).
func TestMiddlewareClientGone499(t *testing.T) {
	for _, c := range goneCases {
		t.Run(c.name, func(t *testing.T) {
			s, lim := setupGone(t, c)
			srv, log, hits := goneServer(t, lim)
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
			errc := make(chan error, 1)
			go func() {
				resp, err := http.DefaultClient.Do(req)
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode != httplimit.StatusClientClosedRequest {
						err = errors.New(resp.Status)
					}
				}
				errc <- err
			}()
			recv(t, "the store asked", c.reached(s))
			cancel()
			// The 499 may come back before the client's cancel is done.
			if err := recv(t, "the client's answer", errc); err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("the cancelled client got %v, want context.Canceled or 499", err)
			}
			checkGone(t, c, lim, log, hits)
		})
	}
}

// TestMiddlewareHalfClosedClient: a client that half-closes its connection
// (shuts down its sending side, as after its last request) while its
// request waits for the store or for its Delay still reads what is sent
// to it: it must get 499 or nothing, never an empty 200 for a request that
// never ran.
func TestMiddlewareHalfClosedClient(t *testing.T) {
	for _, c := range goneCases {
		t.Run(c.name, func(t *testing.T) {
			s, lim := setupGone(t, c)
			srv, log, hits := goneServer(t, lim)
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, "GET /send-sms HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			recv(t, "the store asked", c.reached(s))
			if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			conn.SetReadDeadline(time.Now().Add(hangGuard)) // a hang guard
			raw, err := io.ReadAll(conn)
			if err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
				t.Fatalf("reading the answer: %v", err)
			}
			if len(raw) > 0 {
				resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(string(raw))), nil)
				if err != nil {
					t.Fatalf("the answer %q: %v", raw, err)
				}
				body, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != httplimit.StatusClientClosedRequest || len(body) != 0 || resp.Header.Get(httplimit.HeaderLimit) != "" {
					t.Errorf("the half-closed client got %d %q with X-RateLimit-Limit %q; want 499 with no body or rate-limit headers, or nothing", resp.StatusCode, body, resp.Header.Get(httplimit.HeaderLimit))
				}
			}
			checkGone(t, c, lim, log, hits)
		})
	}
}

// The same in a synctest bubble, where the Delay's wait is on the fake
// clock: a client gone 10s into a minute's Delay is answered 499 without
// the rate-limit headers set before the wait, and its place is free again.
func TestMiddlewareGoneDuringDelay499(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := mustLimiter(t, memstore.New(memstore.Options{}), sluice.LeakyBucket, sluice.PerMinute(1).WithBurst(5))
		h := httplimit.Middleware(httplimit.Options{Limiter: lim})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "ran")
		}))
		first := httptest.NewRecorder()
		h.ServeHTTP(first, httptest.NewRequest("GET", "/", nil))
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(10*time.Second, cancel)
		w := httptest.NewRecorder()
		start := time.Now()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil).WithContext(ctx))
		if w.Code != httplimit.StatusClientClosedRequest || w.Body.Len() != 0 || w.Header().Get(httplimit.HeaderLimit) != "" || w.Header().Get(httplimit.HeaderRateLimit) != "" {
			t.Errorf("gone during its Delay: %d %q, headers %v; want 499, no body, no rate-limit headers", w.Code, w.Body, w.Header())
		}
		if took := time.Since(start); took != 10*time.Second {
			t.Errorf("the gone request returned after %v, want 10s (when its client left)", took)
		}
		if first.Code != 200 || first.Header().Get(httplimit.HeaderLimit) == "" {
			t.Errorf("the first request: %d, headers %v; want 200 with rate-limit headers", first.Code, first.Header())
		}
		// The place given back: the next request leaves when the gone
		// one would have, 50s from now.
		if d, err := lim.AllowN(context.Background(), "default:192.0.2.1", 1); err != nil || d.Delay != 50*time.Second {
			t.Errorf("the next request: %+v, %v; want Delay 50s", d, err)
		}
	})
}
