package listener_test

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// mixedServer serves a handler on a TLS listener that speaks HTTP/2 and
// HTTP/1.1, capped at max; each handler entered is announced on the
// returned channel and holds until release is called (at the latest when
// the test ends). running counts the handlers in at once.
func mixedServer(t *testing.T, max int) (addr string, ca *tlstest.CA, entered <-chan struct{}, running *atomic.Int64, release func()) {
	t.Helper()
	rel := make(chan struct{})
	release = sync.OnceFunc(func() { close(rel) })
	t.Cleanup(release)
	ca = tlstest.NewCA(t, "server")
	pair := ca.Server(t)
	in := make(chan struct{}, 64)
	running = new(atomic.Int64)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		running.Add(1)
		defer running.Add(-1)
		in <- struct{}{}
		<-rel
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, wl := listener.Server(ln, h, listener.Options{Name: "api", MaxConnections: max, ReadHeaderTimeout: time.Minute})
	tl := tls.NewListener(wl, &tls.Config{Certificates: []tls.Certificate{pair.TLS}, NextProtos: []string{"h2", "http/1.1"}})
	go srv.Serve(tl)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), ca, in, running, release
}

// h1Client makes one HTTP/1.1 connection per request.
func h1Client(t *testing.T, ca *tlstest.CA) *http.Client {
	cfg := ca.ClientConfig()
	cfg.NextProtos = []string{"http/1.1"}
	tr := &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// get sends a GET and sends its status (0: it failed) on codes.
func get(ctx context.Context, c *http.Client, url string, codes chan<- int) {
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := c.Do(req)
	if err != nil {
		codes <- 0
		return
	}
	resp.Body.Close()
	codes <- resp.StatusCode
}

// TestMaxConnectionsMixedProtocols: max_connections bounds what the
// listener holds at once over both protocols together. An HTTP/2 request
// beyond the first of its connection takes a place as a connection does,
// so HTTP/1.1 connections and HTTP/2 requests share the one bound: with
// the cap's HTTP/1 connections but one held, an HTTP/2 connection gets
// its one request served and the rest 503 (before, HTTP/2 requests were
// capped on their own, and max−1 HTTP/1 connections plus max HTTP/2
// requests ran: about twice the bound); and with HTTP/2 requests holding
// every place, a new HTTP/1.1 connection is refused.
func TestMaxConnectionsMixedProtocols(t *testing.T) {
	const max = 4
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard, not a measure
	defer cancel()

	t.Run("h1 first", func(t *testing.T) {
		addr, ca, entered, running, release := mixedServer(t, max)
		url := "https://" + addr + "/"
		h1 := h1Client(t, ca)
		codes := make(chan int, 16)
		for range max - 1 {
			go get(ctx, h1, url, codes)
		}
		for range max - 1 {
			select {
			case <-entered:
			case <-ctx.Done():
				t.Fatal("the HTTP/1.1 requests did not all reach the handler")
			}
		}
		tr := &http2.Transport{TLSClientConfig: ca.ClientConfig()}
		t.Cleanup(tr.CloseIdleConnections)
		h2 := &http.Client{Transport: tr}
		const n = 4
		for range n {
			go get(ctx, h2, url, codes)
		}
		// One HTTP/2 request fits (its connection's place); n−1 are refused.
		refused, in := 0, 0
		for refused < n-1 || in < 1 {
			select {
			case c := <-codes:
				if c != http.StatusServiceUnavailable {
					t.Fatalf("a request answered %d before any handler returned; want 503", c)
				}
				refused++
			case <-entered:
				in++
				if got := running.Load(); got > max {
					t.Fatalf("%d handlers running at once (%d over HTTP/1.1, the rest over HTTP/2) on a listener with max_connections %d", got, max-1, max)
				}
			case <-ctx.Done():
				t.Fatalf("%d HTTP/2 requests refused, %d served: want %d and 1", refused, in, n-1)
			}
		}
		release()
		for range max {
			if c := <-codes; c != http.StatusOK {
				t.Errorf("a request served: %d, want 200", c)
			}
		}
	})

	t.Run("h2 first", func(t *testing.T) {
		addr, ca, entered, _, release := mixedServer(t, max)
		url := "https://" + addr + "/"
		tr := &http2.Transport{TLSClientConfig: ca.ClientConfig()}
		t.Cleanup(tr.CloseIdleConnections)
		h2 := &http.Client{Transport: tr}
		codes := make(chan int, 16)
		for range max {
			go get(ctx, h2, url, codes)
		}
		for range max {
			select {
			case <-entered:
			case c := <-codes:
				t.Fatalf("an HTTP/2 request answered %d while the listener held fewer than max_connections", c)
			case <-ctx.Done():
				t.Fatal("the HTTP/2 requests did not all reach the handler")
			}
		}
		// One connection and max−1 more requests: every place is held.
		go get(ctx, h1Client(t, ca), url, codes)
		served := 0
		select {
		case c := <-codes:
			if c != 0 {
				t.Errorf("an HTTP/1.1 request with %d HTTP/2 requests held on a listener with max_connections %d: %d, want the connection refused", max, max, c)
			}
		case <-entered:
			t.Errorf("an HTTP/1.1 request reached the handler with %d HTTP/2 requests held on a listener with max_connections %d; want the connection refused", max, max)
			served = 1
		case <-ctx.Done():
			t.Fatal("the HTTP/1.1 request neither refused nor served")
		}
		release()
		for range max + served {
			if c := <-codes; c != http.StatusOK {
				t.Errorf("a request served: %d, want 200", c)
			}
		}
	})
}
