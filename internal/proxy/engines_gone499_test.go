package proxy_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/proxy"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/memstore"
)

// statusWriter records the status a handler writes, as an access log
// does; Unwrap keeps the proxy's Flush and Hijack working through it.
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

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// holdStore is a store whose answers never come before the caller's
// context ends, as a Redis store slower than the client's patience: the
// client goes away before the decision. Its optional methods are hidden.
type holdStore struct {
	sluice.Store
	asked chan struct{}
}

func (s *holdStore) Take(ctx context.Context, _ sluice.Request) (sluice.Decision, error) {
	s.asked <- struct{}{}
	<-ctx.Done()
	return sluice.Decision{}, ctx.Err()
}

func (s *holdStore) TakeAll(ctx context.Context, _ []sluice.Request, _ []sluice.Decision) error {
	s.asked <- struct{}{}
	<-ctx.Done()
	return ctx.Err()
}

// leaveKinds are the ways a client leaves: it cancels its request (an
// HTTP/1 client closes its connection, an HTTP/2 one resets its stream),
// or, over HTTP/1, half-closes its connection (shuts down its sending
// side) and reads on.
var leaveKinds = []string{"cancel", "half-close"}

// goneRequest sends method path on s and leaves as kind says once
// reached() has fired; it returns what the client read: for a half-close
// the answer's raw bytes ("" for none), for a cancel "".
func goneRequest(t *testing.T, s *eserved, kind, method, path, body string, reached func()) string {
	t.Helper()
	if kind == "cancel" {
		ctx, cancel := context.WithCancel(context.Background())
		req := request(t, s, method, path, body).WithContext(ctx)
		type result struct {
			code int
			err  error
		}
		done := make(chan result, 1)
		go func() {
			resp, err := s.client.Do(req)
			if err != nil {
				done <- result{err: err}
				return
			}
			resp.Body.Close()
			done <- result{code: resp.StatusCode}
		}()
		reached()
		cancel()
		select {
		case res := <-done:
			// The 499 may come back before the client's cancel is done.
			if !errors.Is(res.err, context.Canceled) && res.code != httplimit.StatusClientClosedRequest {
				t.Errorf("the cancelled client got %d, %v; want context.Canceled or 499", res.code, res.err)
			}
		case <-time.After(safety):
			t.Fatalf("the cancelled request did not end within %v", safety)
		}
		return ""
	}
	c := s.dial(t)
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", method, path, len(body), body)
	reached()
	var err error
	switch c := c.(type) {
	case *net.TCPConn:
		err = c.CloseWrite()
	case *tls.Conn:
		err = c.CloseWrite() // close_notify: the server reads its end
	}
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(c)
	if err != nil && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("reading the answer: %v (read %q)", err, raw)
	}
	return string(raw)
}

// wantGoneAnswer checks what a half-closed client read: nothing, or 499
// with no body and no rate-limit headers; never 200.
func wantGoneAnswer(t *testing.T, raw string) {
	t.Helper()
	if raw == "" {
		return
	}
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(raw)), nil)
	if err != nil {
		t.Fatalf("the answer %q: %v", raw, err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != httplimit.StatusClientClosedRequest || len(b) != 0 || resp.Header.Get("X-RateLimit-Limit") != "" {
		t.Errorf("the half-closed client read %q; want 499 with no body or rate-limit headers, or nothing", raw)
	}
}

// wantGone checks that sluice_clients_gone_total{rule} counts one
// request, at stage.
func wantGone(t *testing.T, s *eserved, rule, stage string) {
	t.Helper()
	for _, st := range []string{"decision", "held", "upstream"} {
		want := 0.0
		if st == stage {
			want = 1
		}
		if n := counter(t, s.reg, "sluice_clients_gone_total", map[string]string{"rule": rule, "stage": st}); n != want {
			t.Errorf("sluice_clients_gone_total{rule=%s,stage=%s} = %v, want %v", rule, st, n, want)
		}
	}
}

func recvStatus(t *testing.T, log <-chan int) int {
	t.Helper()
	select {
	case code := <-log:
		return code
	case <-time.After(safety):
		t.Fatalf("the access log recorded nothing within %v", safety)
		return 0
	}
}

// TestEngineGoneWhileHeld499: a request held for its slot under action
// delay whose client leaves is recorded as 499 by the access log around
// the proxy, not as the empty 200 its servers send for a handler that
// wrote nothing; a half-closed client reads 499 or nothing. The request
// never reaches the upstream, and its leaky bucket slot is given back
// (sluice_delay_given_back_total). On every engine, both upstream paths.
func TestEngineGoneWhileHeld499(t *testing.T) {
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		for _, kind := range leaveKinds {
			if kind == "half-close" && ec.h2 {
				continue // no such thing for one HTTP/2 stream
			}
			for _, pa := range paths {
				t.Run(kind+", "+pa.name, func(t *testing.T) {
					var hits atomic.Int64
					up := newRecorder(t, func(w http.ResponseWriter, r *http.Request) { hits.Add(1) })
					log := make(chan int, 4)
					s := startOn(t, ec, up.srv.URL, engineOpts{access: func(code int) { log <- code }, specs: []rules.Spec{
						{Name: "slow", Rate: "1/m", Action: "delay", MaxDelay: 2 * time.Minute, Algorithm: "leaky_bucket"},
					}})
					if resp, _ := s.do(t, request(t, s, pa.method, "/first", pa.body)); resp.StatusCode != 200 {
						t.Fatalf("first request: %d", resp.StatusCode)
					}
					if code := recvStatus(t, log); code != 200 {
						t.Fatalf("the access log recorded %d for the first request, want 200", code)
					}
					raw := goneRequest(t, s, kind, pa.method, "/held", pa.body, func() {
						until(t, "the second request held", func() bool { return s.active.Load() == 1 })
					})
					wantGoneAnswer(t, raw)
					if code := recvStatus(t, log); code != httplimit.StatusClientClosedRequest {
						t.Errorf("the access log recorded %d for the request whose client left while held, want 499", code)
					}
					if n := hits.Load(); n != 1 {
						t.Errorf("upstream got %d requests; want 1 (the held one abandoned)", n)
					}
					// The limiter refused neither: the held request was
					// admitted to its slot (given back) and its client left;
					// it used to count denied.
					if a, d := counter(t, s.reg, "sluice_decisions_total", map[string]string{"rule": "slow", "result": "allowed"}),
						counter(t, s.reg, "sluice_decisions_total", map[string]string{"rule": "slow", "result": "denied"}); a != 2 || d != 0 {
						t.Errorf("sluice_decisions_total{rule=slow}: allowed %v, denied %v; want 2, 0", a, d)
					}
					wantGone(t, s, "slow", "held")
					if n := counter(t, s.reg, "sluice_delay_given_back_total", map[string]string{"rule": "slow"}); n != 1 {
						t.Errorf("sluice_delay_given_back_total{rule=slow} = %v, want 1", n)
					}
				})
			}
		}
	})
}

// TestEngineGoneBeforeDecision499: a client that leaves before the store
// answers is recorded as 499 and counted in no metric: no verdict (the
// store decided nothing), no store error. Where the proxy watches its
// client while the store decides: under a delay rule on every engine
// (the h1 front watches the connection while a request may be held), and
// under any rule on net/http (the TLS engines).
func TestEngineGoneBeforeDecision499(t *testing.T) {
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		for _, kind := range leaveKinds {
			if kind == "half-close" && ec.h2 {
				continue
			}
			for _, action := range []string{"delay", "reject"} {
				if action == "reject" && !ec.tls {
					continue // the h1 front does not watch a request no rule may hold
				}
				t.Run(kind+", "+action, func(t *testing.T) {
					var hits atomic.Int64
					up := newRecorder(t, func(w http.ResponseWriter, r *http.Request) { hits.Add(1) })
					log := make(chan int, 4)
					st := &holdStore{Store: memstore.New(memstore.Options{}), asked: make(chan struct{}, 4)}
					spec := rules.Spec{Name: "r", Rate: "10/m", Action: action, Algorithm: "leaky_bucket"}
					if action == "delay" {
						spec.MaxDelay = time.Minute
					}
					s := startOn(t, ec, up.srv.URL, engineOpts{store: st, access: func(code int) { log <- code }, specs: []rules.Spec{spec}})
					raw := goneRequest(t, s, kind, "GET", "/x", "", func() {
						select {
						case <-st.asked:
						case <-time.After(safety):
							t.Fatalf("the store was not asked within %v", safety)
						}
					})
					wantGoneAnswer(t, raw)
					if code := recvStatus(t, log); code != httplimit.StatusClientClosedRequest {
						t.Errorf("the access log recorded %d, want 499", code)
					}
					if n := hits.Load(); n != 0 {
						t.Errorf("upstream got %d requests; want none", n)
					}
					for _, res := range []string{"allowed", "denied"} {
						if n := counter(t, s.reg, "sluice_decisions_total", map[string]string{"rule": "r", "result": res}); n > 0 {
							t.Errorf("sluice_decisions_total{rule=r,result=%s} = %v, want nothing counted", res, n)
						}
					}
					if n := counter(t, s.reg, "sluice_store_errors_total", nil); n > 0 {
						t.Errorf("sluice_store_errors_total = %v, want 0", n)
					}
					wantGone(t, s, "r", "decision")
				})
			}
		}
	})
}

// TestEngineGoneWhileUpstreamWorks499: a client that leaves while the
// upstream works on its request frees the upstream request and is
// recorded as 499, not 200; a half-closed client reads 499 or nothing. On
// every engine and path: the h1 front's fast path, which notices its
// client gone only by watching the connection once the upstream is slow,
// too (it used to abort its handler, which the access log never saw).
func TestEngineGoneWhileUpstreamWorks499(t *testing.T) {
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		for _, kind := range leaveKinds {
			if kind == "half-close" && ec.h2 {
				continue
			}
			t.Run(kind, func(t *testing.T) {
				arrived := make(chan struct{}, 1)
				freed := make(chan struct{}, 1)
				up := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
					arrived <- struct{}{}
					<-r.Context().Done()
					freed <- struct{}{}
				})
				log := make(chan int, 4)
				s := startOn(t, ec, up.srv.URL, engineOpts{access: func(code int) { log <- code },
					proxy: proxy.Options{ResponseHeaderTimeout: 10 * time.Minute}})
				raw := goneRequest(t, s, kind, "GET", "/slow", "", func() {
					select {
					case <-arrived:
					case <-time.After(safety):
						t.Fatalf("the request never reached the upstream")
					}
				})
				wantGoneAnswer(t, raw)
				select {
				case <-freed:
				case <-time.After(safety):
					t.Fatalf("the upstream still held the request %v after its client went away", safety)
				}
				if code := recvStatus(t, log); code != httplimit.StatusClientClosedRequest {
					t.Errorf("the access log recorded %d, want 499", code)
				}
				// Admitted and forwarded: allowed, and gone at the upstream.
				if n := counter(t, s.reg, "sluice_decisions_total", map[string]string{"rule": "r", "result": "allowed"}); n != 1 {
					t.Errorf("sluice_decisions_total{rule=r,result=allowed} = %v, want 1", n)
				}
				wantGone(t, s, "r", "upstream")
			})
		}
	})
}
