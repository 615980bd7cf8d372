package listener_test

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/http2"

	"github.com/sluicehq/sluice/internal/h2test"
	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/metrics/metricstest"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// TestRapidReset (CVE-2023-44487): a client that opens HTTP/2 streams
// and resets each at once costs itself nothing, while each stream starts
// a handler; net/http runs at most 250 of a connection's at once but
// starts the next as soon as one returns, so one connection could keep
// the server starting handlers without end. The listener closes a
// connection whose client has reset more than half of its requests early
// (once it has carried 500), counts it, and serves other clients on.
func TestRapidReset(t *testing.T) {
	ca := tlstest.NewCA(t, "server")
	var started atomic.Int64
	// The handler reads the request's body, as /v1/check and the proxy
	// do: the reset ends it.
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started.Add(1)
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	})
	addr, reg := resetServer(t, ca, h)

	const n = 10_000
	c := h2test.Dial(t, addr, ca.ClientConfig())
	fl := c.RapidReset(t, 1, n, false, ":method", "POST", ":scheme", "https", ":path", "/v1/check", ":authority", addr, "content-type", "application/json")
	t.Logf("%d streams sent, %d handlers started; served after: %v, GOAWAY %v, %v", fl.Sent, started.Load(), fl.Served, fl.GoAway, fl.Err)
	if fl.Served {
		t.Errorf("the server read %d streams opened and reset at once, started %d handlers, and still serves the connection; want it closed", n, started.Load())
	}
	// At most the early resets that close it, and those running then
	// (250 on a connection).
	if got := started.Load(); got > 1000 {
		t.Errorf("%d handlers started for one connection's rapid resets, want at most 1000", got)
	}
	if got := metricstest.Gather(t, reg)[`sluice_connections_closed_resets_total{listener="api"}`]; got != 1 {
		t.Errorf("sluice_connections_closed_resets_total = %v, want 1", got)
	}

	// Another client is served, over HTTP/2 as well.
	tr := &http2.Transport{TLSClientConfig: ca.ClientConfig()}
	t.Cleanup(tr.CloseIdleConnections)
	resp, err := (&http.Client{Transport: tr, Timeout: time.Minute}).Get("https://" + addr + "/")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("another client after the rapid reset: %v %v, want 200", resp, err)
	}
	resp.Body.Close()
}

// TestEarlyResetsWithinLimit: a client that cancels some of its requests
// (a browser leaving a page) keeps its connection: the resets close it
// only when they are more than half of its requests.
func TestEarlyResetsWithinLimit(t *testing.T) {
	ca := tlstest.NewCA(t, "server")
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	})
	addr, _ := resetServer(t, ca, h)

	c := h2test.Dial(t, addr, ca.ClientConfig())
	get := []string{":method", "GET", ":scheme", "https", ":path", "/", ":authority", addr}
	id := uint32(1)
	for range 3 {
		// 150 requests served, then 150 reset early: half, not more.
		for range 150 {
			if a := c.Request(t, id, true, get...); a.Status != "200" {
				t.Fatalf("stream %d: %+v, want 200", id, a)
			}
			id += 2
		}
		fl := c.RapidReset(t, id, 150, false, ":method", "POST", ":scheme", "https", ":path", "/", ":authority", addr)
		if !fl.Served {
			t.Fatalf("after %d requests, half of them reset early: the connection ended (GOAWAY %v, %v); want it served", id/2+150, fl.GoAway, fl.Err)
		}
		id += 2 * 150
	}
}

// TestEarlyResetsFewRequests: a client that cancels most of its requests
// early but sends few (a browser's search-as-you-type, each keystroke
// cancelling the last fetch) keeps its connection: as Envoy does, the
// check applies only once a connection has carried 500 requests.
func TestEarlyResetsFewRequests(t *testing.T) {
	ca := tlstest.NewCA(t, "server")
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	})
	addr, reg := resetServer(t, ca, h)

	c := h2test.Dial(t, addr, ca.ClientConfig())
	get := []string{":method", "GET", ":scheme", "https", ":path", "/", ":authority", addr}
	id := uint32(1)
	for range 50 {
		if a := c.Request(t, id, true, get...); a.Status != "200" {
			t.Fatalf("stream %d: %+v, want 200", id, a)
		}
		id += 2
	}
	// 400 cancelled at once: 450 requests, 8 in 9 reset early.
	fl := c.RapidReset(t, id, 400, false, ":method", "POST", ":scheme", "https", ":path", "/", ":authority", addr)
	if !fl.Served {
		t.Fatalf("450 requests, 400 of them reset early: the connection ended (GOAWAY %v, %v); want it served (under 500 requests)", fl.GoAway, fl.Err)
	}
	if got := metricstest.Gather(t, reg)[`sluice_connections_closed_resets_total{listener="api"}`]; got != 0 {
		t.Errorf("sluice_connections_closed_resets_total = %v, want 0", got)
	}
}

// TestHeadRequestsNotEarlyResets: a HEAD request's stream ends as soon as
// its headers are sent (a HEAD answer has no body), so net/http cancels
// its context then, while the handler may still run (it flushed the
// headers, or wrote a body past net/http's buffer, as a handler that
// ignores HEAD does). The client reset nothing: a connection carrying
// many such requests (a monitor, a link checker) must not be closed as a
// rapid reset.
func TestHeadRequestsNotEarlyResets(t *testing.T) {
	ca := tlstest.NewCA(t, "server")
	// The handler reads the request's body (none: the stream ends with
	// the HEADERS, but for the rapid reset below, whose streams do not
	// end, until the reset), then flushes the answer's headers.
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/plain")
		w.(http.Flusher).Flush()
	})
	addr, reg := resetServer(t, ca, h)

	c := h2test.Dial(t, addr, ca.ClientConfig())
	head := []string{":method", "HEAD", ":scheme", "https", ":path", "/", ":authority", addr}
	id := uint32(1)
	for range 300 {
		if a := c.Request(t, id, true, head...); a.Status != "200" {
			t.Fatalf("HEAD on stream %d: %+v, want 200 (the connection closed as a rapid reset?)", id, a)
		}
		id += 2
	}
	if got := metricstest.Gather(t, reg)[`sluice_connections_closed_resets_total{listener="api"}`]; got != 0 {
		t.Errorf("sluice_connections_closed_resets_total = %v after 300 HEAD requests answered, want 0", got)
	}

	// HEAD requests opened and reset at once are still rapid resets.
	fl := h2test.Dial(t, addr, ca.ClientConfig()).RapidReset(t, 1, 10_000, false, head...)
	if fl.Served {
		t.Errorf("10,000 HEAD requests opened and reset at once: the connection is still served, want it closed")
	}
	if got := metricstest.Gather(t, reg)[`sluice_connections_closed_resets_total{listener="api"}`]; got != 1 {
		t.Errorf("sluice_connections_closed_resets_total = %v after a HEAD rapid reset, want 1", got)
	}
}

// resetServer serves h over TLS (HTTP/2 and HTTP/1.1, a certificate of
// ca) through a Listener capped at 100, its metrics in the returned registry.
func resetServer(t *testing.T, ca *tlstest.CA, h http.Handler) (addr string, reg *prometheus.Registry) {
	t.Helper()
	pair := ca.Server(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reg = prometheus.NewRegistry()
	srv, wl := listener.Server(ln, h, listener.Options{Name: "api", MaxConnections: 100, ReadHeaderTimeout: time.Minute, Metrics: metrics.New(reg)})
	tl := tls.NewListener(wl, &tls.Config{Certificates: []tls.Certificate{pair.TLS}, NextProtos: []string{"h2", "http/1.1"}})
	go srv.Serve(tl)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), reg
}
