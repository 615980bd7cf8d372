package harness

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// pipeListener is an in-memory listener: dial hands it the server's end
// of a net.Pipe, so that a server and Paced can run inside a synctest
// bubble, on its fake clock.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

func (l *pipeListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// pacedInBubble runs Paced at 1,000/s for 1s (fake time) against a
// net/http server whose handler is h, over o.Conns connections.
func pacedInBubble(t *testing.T, conns int, h func(w http.ResponseWriter, r *http.Request)) (PacedResult, error) {
	ln := newPipeListener()
	srv := &http.Server{Handler: http.HandlerFunc(h)}
	go srv.Serve(ln)
	defer srv.Close()
	return Paced(t.Context(), PacedOptions{
		Addr: "pipe", Request: GetRequest("pipe", "/"), Rate: 1000, Duration: time.Second, Conns: conns,
		Dial: ln.dial, newTicker: newSleepTicker,
	})
}

// On a server that answers at once, every request goes out and comes
// back at its intended time: the achieved rate is the asked one, and no
// latency or lag is left.
func TestPacedRateOnTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var served atomic.Int64
		r, err := pacedInBubble(t, 4, func(w http.ResponseWriter, _ *http.Request) {
			served.Add(1)
			w.Write([]byte("ok\n"))
		})
		if err != nil {
			t.Fatal(err)
		}
		if r.Sent != 1000 || r.Answered != 1000 || served.Load() != 1000 || r.Errors != 0 || r.Non2xx != 0 {
			t.Fatalf("sent %d, answered %d, served %d, errors %d, non-2xx %d; want 1000, 1000, 1000, 0, 0",
				r.Sent, r.Answered, served.Load(), r.Errors, r.Non2xx)
		}
		if r.Achieved != 1000 || r.Elapsed != time.Second {
			t.Fatalf("achieved %v/s, last answer at %v; want 1000/s at 1s", r.Achieved, r.Elapsed)
		}
		if r.Max != 0 || r.LagMax != 0 {
			t.Fatalf("max latency %v, max lag %v; want 0 on fake time with an instant server", r.Max, r.LagMax)
		}
	})
}

// When the server stalls, every request due during the stall is late by
// what is left of it, whether it waited in the server (the 4 that the 4
// connections had sent) or in the generator for a free connection: the
// latency runs from the intended send time, so the stall is not hidden
// (measured from the send, only 4 requests would show it). The server
// stalls from 100 ms to 200 ms: the requests due at 100..199 ms take
// 100..1 ms, the rest 0.
func TestPacedLatencyFromIntendedTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var inServer atomic.Int64 // requests that waited in the server
		r, err := pacedInBubble(t, 4, func(w http.ResponseWriter, _ *http.Request) {
			if el := time.Since(start); el >= 100*time.Millisecond && el < 200*time.Millisecond {
				inServer.Add(1)
				time.Sleep(200*time.Millisecond - el)
			}
			w.Write([]byte("ok\n"))
		})
		if err != nil {
			t.Fatal(err)
		}
		if inServer.Load() != 4 {
			t.Fatalf("%d requests waited in the server, want 4 (one per connection)", inServer.Load())
		}
		// 1,000 latencies: 900 of 0, then 1..100 ms.
		want := map[string][2]time.Duration{
			"p50":   {r.P50, 0},
			"p90":   {r.P90, 0},
			"p99":   {r.P99, 90 * time.Millisecond}, // rank 990: the 90th of 1..100
			"p99.9": {r.P999, 99 * time.Millisecond},
			"max":   {r.Max, 100 * time.Millisecond},
			// The requests due at 104..199 ms waited for a connection
			// until 200 ms: 96 lags of 1..96 ms.
			"lag p99": {r.LagP99, 86 * time.Millisecond},
			"lag max": {r.LagMax, 96 * time.Millisecond},
		}
		for name, g := range want {
			if g[0] != g[1] {
				t.Errorf("%s = %v, want %v", name, g[0], g[1])
			}
		}
		if r.Achieved != 1000 || r.Answered != 1000 {
			t.Errorf("achieved %v/s, answered %d; want 1000/s, 1000", r.Achieved, r.Answered)
		}
	})
}

// A server too slow for the rate: one connection, 2 ms per answer, at
// 1,000/s asked. Paced returns ErrShortfall with what it measured: the
// 1,000 answers, the last at 1 ms + 1,000 × 2 ms.
func TestPacedShortfall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, err := pacedInBubble(t, 1, func(w http.ResponseWriter, _ *http.Request) {
			time.Sleep(2 * time.Millisecond)
			w.Write([]byte("ok\n"))
		})
		if !errors.Is(err, ErrShortfall) {
			t.Fatalf("err = %v, want ErrShortfall", err)
		}
		if r.Answered != 1000 || r.Elapsed != 2001*time.Millisecond || r.Achieved != 1000/r.Elapsed.Seconds() {
			t.Fatalf("answered %d, last at %v, achieved %v/s; want 1000, at 2.001s, 1000/2.001 per s", r.Answered, r.Elapsed, r.Achieved)
		}
	})
}

// The same on a real loopback server and the real timer (the timerfd):
// every request is sent and answered once, and a stall shows in the
// latencies from the intended time. The server holds every request from
// the first one's arrival until 100 ms later; the 26 requests due in the
// first 52 ms (every 2 ms from 2 ms) end at least 50 ms after they were
// due, whatever the scheduling, so the p90 (the 21st slowest of 200) is
// at least 50 ms; and with 2 connections, both held, the requests behind
// them waited for a connection, at least 50 ms as well. Only lower bounds:
// the clock is real.
func TestPacedLoopback(t *testing.T) {
	var (
		served atomic.Int64
		once   sync.Once
		gate   = make(chan struct{})
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		served.Add(1)
		once.Do(func() { time.AfterFunc(100*time.Millisecond, func() { close(gate) }) })
		<-gate
		w.Write([]byte("ok\n"))
	}))
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	r, err := Paced(t.Context(), PacedOptions{Addr: addr, Request: GetRequest(addr, "/"), Rate: 500, Duration: 400 * time.Millisecond, Conns: 2})
	if errors.Is(err, ErrShortfall) {
		t.Logf("shortfall on a busy machine (not this test's subject): %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	if r.Sent != 200 || r.Answered != 200 || served.Load() != 200 || r.Errors != 0 || r.Non2xx != 0 {
		t.Fatalf("sent %d, answered %d, served %d, errors %d (%v), non-2xx %d; want 200, 200, 200, 0, 0",
			r.Sent, r.Answered, served.Load(), r.Errors, r.FirstErr, r.Non2xx)
	}
	if r.P90 < 50*time.Millisecond || r.LagMax < 50*time.Millisecond {
		t.Fatalf("p90 %v, max lag %v; want both at least 50ms (the stall)", r.P90, r.LagMax)
	}
	if r.P50 > r.P90 || r.P90 > r.P99 || r.P99 > r.P999 || r.P999 > r.Max {
		t.Fatalf("quantiles out of order: %v %v %v %v %v", r.P50, r.P90, r.P99, r.P999, r.Max)
	}
}
