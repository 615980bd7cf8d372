package proxy_test

import (
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/rules"
)

// Action delay smooths a burst: requests reach the upstream period/rate
// apart (timers never fire early, so the gaps have a floor), and the one
// beyond the queue gets 429. Exact timings are tested in package engine
// with testing/synctest.
func TestDelaySmoothsBurst(t *testing.T) {
	f := start(t, setup{specs: []rules.Spec{
		{Name: "smooth", Rate: "20/s", Burst: 3, Action: "delay", MaxDelay: time.Second, Algorithm: "leaky_bucket"},
	}})
	// The queue (3 behind the one leaving now) takes 4; a 5th arriving at
	// once waits for a slot; max_delay 1s covers it, so all 5 pass.
	const n = 5
	codes := make([]int, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			resp, _ := get(t, f.proxy.URL+"/burst", nil)
			codes[i] = resp.StatusCode
		})
	}
	wg.Wait()
	// The 5th slot is 4 × 50ms after the first decision, itself after start.
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Errorf("a burst of %d at 20/s passed in %v, want at least 200ms (shaped, not let through)", n, took)
	}
	for i, c := range codes {
		if c != 200 {
			t.Errorf("burst request %d: %d, want 200 (delayed, not rejected)", i, c)
		}
	}
	f.up.mu.Lock()
	at := append([]time.Time(nil), f.up.at...)
	f.up.mu.Unlock()
	if len(at) != n {
		t.Fatalf("upstream saw %d requests, want %d", len(at), n)
	}
	// At the upstream the requests arrive spread over their slots, 50ms
	// apart from the first decision (itself after start): at most i of
	// them are let go before start + i × 50ms, so the (i+1)th to arrive
	// comes no sooner. Lower bounds only, on the clock the delays run on:
	// a loaded machine makes the arrivals later, never sooner. (A bound
	// on the span between the first and the last arrival failed when the
	// first one's forwarding was slow.)
	for i := range at {
		if slot := time.Duration(i) * 50 * time.Millisecond; at[i].Before(start.Add(slot)) {
			t.Errorf("burst of %d: arrival %d reached the upstream %v after the burst began, before its slot at %v", n, i+1, at[i].Sub(start), slot)
		}
	}
}

func TestDelayOverMaxDelayRejects(t *testing.T) {
	f := start(t, setup{specs: []rules.Spec{
		{Name: "slow", Rate: "1/m", Action: "delay", MaxDelay: 10 * time.Millisecond, Algorithm: "fixed_window"},
	}})
	get(t, f.proxy.URL+"/", nil)
	resp, body := get(t, f.proxy.URL+"/", nil)
	if resp.StatusCode != 429 || !strings.Contains(body, `"rule":"slow"`) {
		t.Errorf("request needing a minute under max_delay 10ms: %d %q, want 429", resp.StatusCode, body)
	}
	if f.up.hits.Load() != 1 {
		t.Errorf("upstream hits = %d, want 1", f.up.hits.Load())
	}
}

// A client that goes away while its request is held by action delay ends
// the wait: the request never reaches the upstream and the connection is
// let go (on the h1 front, which watches the connection for that wait).
func TestDelayClientGone(t *testing.T) {
	f := start(t, setup{specs: []rules.Spec{
		{Name: "slow", Rate: "1/m", Action: "delay", MaxDelay: 2 * time.Minute, Algorithm: "fixed_window"},
	}})
	if resp, _ := get(t, f.proxy.URL+"/first", nil); resp.StatusCode != 200 {
		t.Fatalf("first request: %d", resp.StatusCode)
	}
	open := func() float64 {
		mfs, _ := f.reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "sluice_connections_open" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return -1
	}
	before := open() // the first request's keep-alive connection
	c, err := net.Dial("tcp", f.proxy.Addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET /held HTTP/1.1\r\nHost: x\r\n\r\n") // held up to a minute
	for open() != before+1 {
		runtime.Gosched() // until accepted
	}
	c.Close()
	deadline := time.Now().Add(30 * time.Second) // a bound, not a threshold: the wait is a minute
	for open() != before {
		if time.Now().After(deadline) {
			t.Fatal("the held request of a client that went away still holds its connection")
		}
		runtime.Gosched()
	}
	if n := f.up.hits.Load(); n != 1 {
		t.Errorf("upstream got %d requests; want 1 (the held one abandoned)", n)
	}
}
