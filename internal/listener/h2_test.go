package listener_test

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/http2"

	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/metrics/metricstest"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// TestMaxConnectionsBoundsHTTP2Streams: max_connections bounds the
// requests a listener serves at once, HTTP/2 included: one HTTP/2
// connection carries up to 250 requests, so the connection cap alone let
// 250 × max_connections handlers run at once (each a goroutine, through
// the proxy an upstream connection), where HTTP/1 allows one per
// connection. Past the cap a request is answered 503 at once.
func TestMaxConnectionsBoundsHTTP2Streams(t *testing.T) {
	ca := tlstest.NewCA(t, "server")
	pair := ca.Server(t)
	const max, n = 5, 20
	var running, most atomic.Int64
	release := make(chan struct{})
	entered := make(chan struct{}, n)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := running.Add(1)
		for m := most.Load(); c > m && !most.CompareAndSwap(m, c); m = most.Load() {
		}
		entered <- struct{}{}
		<-release
		running.Add(-1)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	srv, wl := listener.Server(ln, h, listener.Options{Name: "proxy", MaxConnections: max, ReadHeaderTimeout: time.Minute, Metrics: m})
	tl := tls.NewListener(wl, &tls.Config{Certificates: []tls.Certificate{pair.TLS}, NextProtos: []string{"h2", "http/1.1"}})
	go srv.Serve(tl)
	t.Cleanup(func() { srv.Close() })
	tr := &http2.Transport{TLSClientConfig: ca.ClientConfig()}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}
	codes := make(chan int, n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard, not a measure
	defer cancel()
	for range n {
		go func() {
			req, _ := http.NewRequestWithContext(ctx, "GET", "https://"+ln.Addr().String()+"/", nil)
			resp, err := client.Do(req)
			if err != nil {
				codes <- 0
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	// All n are sent on one connection: max run, the rest are refused.
	refused, in := 0, 0
	for refused < n-max {
		select {
		case c := <-codes:
			if c != http.StatusServiceUnavailable {
				t.Fatalf("a request answered %d before any handler returned; want 503", c)
			}
			refused++
		case <-entered:
			if in++; in > max {
				t.Fatalf("%d handlers running at once on a listener with max_connections %d", in, max)
			}
		case <-ctx.Done():
			t.Fatalf("%d refused, %d handlers running: neither all %d over the cap refused nor more than %d running", refused, in, n-max, max)
		}
	}
	close(release)
	for range max {
		if c := <-codes; c != http.StatusOK {
			t.Errorf("a request served: %d, want 200", c)
		}
	}
	if got := most.Load(); got > max {
		t.Errorf("%d handlers ran at once, want at most %d", got, max)
	}
	if got := metricstest.Gather(t, reg)[`sluice_requests_refused_total{listener="proxy"}`]; got != n-max {
		t.Errorf("sluice_requests_refused_total = %v, want %d", got, n-max)
	}
}
