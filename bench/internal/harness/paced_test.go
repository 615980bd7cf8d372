package harness

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// These tests run Paced on the real clock against real loopback servers,
// so they assert counts, which are exact, and latencies only as lower
// bounds that follow from what the server did, whatever the scheduling:
// never a wall-clock ceiling. A shortfall (a busy machine) is logged, not
// failed, except where the server makes it certain.

func pacedServer(t *testing.T, h http.HandlerFunc) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

func paced(t *testing.T, o PacedOptions) PacedResult {
	t.Helper()
	o.Request = GetRequest(o.Addr, "/")
	r, err := Paced(t.Context(), o)
	if errors.Is(err, ErrShortfall) {
		t.Logf("shortfall (a busy machine, not this test's subject): %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	if r.Answered+r.Errors != r.Sent {
		t.Fatalf("answered %d + errors %d != sent %d: a request lost", r.Answered, r.Errors, r.Sent)
	}
	if r.P50 > r.P90 || r.P90 > r.P99 || r.P99 > r.P999 || r.P999 > r.Max || r.LagP50 > r.LagP99 || r.LagP99 > r.LagMax {
		t.Fatalf("quantiles out of order: %+v", r)
	}
	return r
}

// Every request of the schedule (rate × duration) is sent once and
// answered once; answers outside 2xx/3xx are counted; a Connection: close
// costs a reconnection, not an error.
func TestPacedSendsTheSchedule(t *testing.T) {
	var served atomic.Int64
	addr := pacedServer(t, func(w http.ResponseWriter, _ *http.Request) {
		k := served.Add(1)
		if k%3 == 0 {
			w.Header().Set("Connection", "close")
		}
		if k%2 == 0 {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		w.Write([]byte("ok\n"))
	})
	r := paced(t, PacedOptions{Addr: addr, Rate: 1000, Duration: 300 * time.Millisecond, Conns: 4})
	if r.Sent != 300 || r.Answered != 300 || served.Load() != 300 || r.Errors != 0 || r.Non2xx != 150 {
		t.Fatalf("sent %d, answered %d, served %d, errors %d (%v), non-2xx %d; want 300, 300, 300, 0, 150",
			r.Sent, r.Answered, served.Load(), r.Errors, r.FirstErr, r.Non2xx)
	}
	if r.Conns != 4 || r.Asked != 1000 {
		t.Fatalf("conns %d, asked %v; want 4, 1000", r.Conns, r.Asked)
	}
	if r.CPUPressure != -1 && (r.CPUPressure < 0 || r.CPUPressure > 1.1) {
		t.Fatalf("CPU pressure %v, want a share of the step's time (or -1)", r.CPUPressure)
	}
}

// A stall counts from each request's intended send time, including the
// time a request waited for a free connection: the server holds every
// request from the first one's arrival until 100 ms later. The 26
// requests due in the first 52 ms (every 2 ms from 2 ms) end at least
// 50 ms after they were due, so the p90 (the 21st slowest of 200) is at
// least 50 ms; timed from their send, only the 2 held by the server would
// be. With both connections held, the requests behind them were sent at
// least 50 ms late (the lag).
func TestPacedLatencyFromIntendedTime(t *testing.T) {
	var (
		once sync.Once
		gate = make(chan struct{})
	)
	addr := pacedServer(t, func(w http.ResponseWriter, _ *http.Request) {
		once.Do(func() { time.AfterFunc(100*time.Millisecond, func() { close(gate) }) })
		<-gate
		w.Write([]byte("ok\n"))
	})
	r := paced(t, PacedOptions{Addr: addr, Rate: 500, Duration: 400 * time.Millisecond, Conns: 2})
	if r.Sent != 200 || r.Answered != 200 || r.Errors != 0 {
		t.Fatalf("sent %d, answered %d, errors %d (%v); want 200, 200, 0", r.Sent, r.Answered, r.Errors, r.FirstErr)
	}
	if r.P90 < 50*time.Millisecond || r.LagMax < 50*time.Millisecond {
		t.Fatalf("p90 %v, max lag %v; want both at least 50ms (the stall)", r.P90, r.LagMax)
	}
	if r.SentP50 > r.P50 || r.SentP99 > r.P99 {
		t.Fatalf("from the send p50 %v p99 %v, above the latencies from the intended time %v %v", r.SentP50, r.SentP99, r.P50, r.P99)
	}
}

// A server too slow for the rate (one connection, at least 2 ms per
// answer, 1,000/s asked) cannot give more than 500/s: Paced says so with
// ErrShortfall, and still returns what it measured.
func TestPacedShortfall(t *testing.T) {
	addr := pacedServer(t, func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(2 * time.Millisecond) // the server's cost, not a wait for a condition
		w.Write([]byte("ok\n"))
	})
	r, err := Paced(t.Context(), PacedOptions{Addr: addr, Request: GetRequest(addr, "/"), Rate: 1000, Duration: 200 * time.Millisecond, Conns: 1})
	if !errors.Is(err, ErrShortfall) {
		t.Fatalf("err = %v, want ErrShortfall", err)
	}
	if r.Answered != 200 || r.Achieved > 500 || r.Elapsed < 400*time.Millisecond {
		t.Fatalf("answered %d, achieved %v/s, last answer at %v; want 200, at most 500/s, at least 400ms", r.Answered, r.Achieved, r.Elapsed)
	}
}

// A request with no answer within the timeout is an error (its
// connection reopened), the others are answered.
func TestPacedTimeout(t *testing.T) {
	var served atomic.Int64
	hold := make(chan struct{})
	addr := pacedServer(t, func(w http.ResponseWriter, _ *http.Request) {
		if served.Add(1) == 5 {
			<-hold
		}
		w.Write([]byte("ok\n"))
	})
	defer close(hold) // before the server's Close (t.Cleanup) waits for the handler
	r := paced(t, PacedOptions{Addr: addr, Rate: 500, Duration: 200 * time.Millisecond, Conns: 2, Timeout: time.Second})
	if r.Sent != 100 || r.Answered != 99 || r.Errors != 1 || r.FirstErr == nil || !strings.Contains(r.FirstErr.Error(), "no answer within 1s") {
		t.Fatalf("sent %d, answered %d, errors %d (%v); want 100, 99, 1 (no answer within 1s)", r.Sent, r.Answered, r.Errors, r.FirstErr)
	}
}

// Nothing listening: Paced fails at once, naming the address.
func TestPacedConnectRefused(t *testing.T) {
	addrs, err := FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Paced(t.Context(), PacedOptions{Addr: addrs[0], Request: GetRequest(addrs[0], "/"), Rate: 100, Duration: time.Second})
	if err == nil || !strings.Contains(err.Error(), addrs[0]) {
		t.Fatalf("err = %v, want a connect error naming %s", err, addrs[0])
	}
}

// The generator wakes only on its timer, at most once per tick however
// many requests and answers a tick holds: 2,000/s for 200 ms on a 5 ms
// tick is 10 requests per tick, 40 ticks, whatever the answers do.
func TestPacedWakesPerTick(t *testing.T) {
	addr := pacedServer(t, func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	r := paced(t, PacedOptions{Addr: addr, Rate: 2000, Duration: 200 * time.Millisecond, Conns: 32, Tick: 5 * time.Millisecond})
	if r.Sent != 400 || r.Answered != 400 {
		t.Fatalf("sent %d, answered %d; want 400, 400", r.Sent, r.Answered)
	}
	if most := int64(r.Elapsed/(5*time.Millisecond)) + 1; r.Wakeups < 1 || r.Wakeups > most {
		t.Fatalf("%d wake-ups in %v, want 1 to %d (one per 5ms tick at most)", r.Wakeups, r.Elapsed, most)
	}
}
