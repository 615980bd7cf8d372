package listener_test

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/tlsconf"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// refuseWait has the listener hold a refused connection for d (a test
// of what is not the time bound holds them longer than a loaded machine
// takes over them).
func refuseWait(d time.Duration) func(*listener.Listener) {
	return func(l *listener.Listener) { listener.SetRefuseWait(l, d) }
}

// countingH2 is Go's HTTP/2 transport (a gateway's: Caddy's forward_auth
// speaks it) to a refused listener, counting the connections it dials.
func countingH2(t *testing.T, ca *tlstest.CA) (*http2.Transport, *atomic.Int64) {
	t.Helper()
	dials := new(atomic.Int64)
	tr := &http2.Transport{
		TLSClientConfig: ca.ClientConfig(),
		DialTLSContext: func(ctx context.Context, network, addr string, cfg *tls.Config) (net.Conn, error) {
			dials.Add(1)
			return (&tls.Dialer{Config: cfg}).DialContext(ctx, network, addr)
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return tr, dials
}

// attempt sends req over tr and returns its status (0: an error, which it
// reports) and the connections the transport tried it on: a request the
// transport tries a third time has waited out its retry backoff (the
// first retry is at once, the next a second later, then two, four...).
func attempt(t *testing.T, ctx context.Context, tr http.RoundTripper, req *http.Request) (status, tries int) {
	var n atomic.Int64
	req = req.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { n.Add(1) },
	}))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Errorf("a request over the cap, tried %d times: %v, want a 503", n.Load(), err)
		return 0, int(n.Load())
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, int(n.Load())
}

// TestRefusedH2ManyAtOnce: many requests with long heads sent at once by
// Go's HTTP/2 transport (a gateway passing on its clients' requests and
// cookies) to a listener over its cap are all answered 503 by the
// refused connections, none of them after the transport's retry backoff:
// no request is tried a third time. Before, a refused connection sent its
// GOAWAY with the first answer, so that the transport tried most requests
// again on a new connection, refused the same way, and again after a
// second, two, four...: some 503 a minute after they were sent, if at
// all, which the gateway's own clients waited. The connections are held
// for a minute here, so that it is the bound on bytes read that ends
// them, however slow the machine.
func TestRefusedH2ManyAtOnce(t *testing.T) {
	ca := tlstest.NewCA(t, "server")
	addr, _, _ := tlsCapped(t, ca, tlsconf.Options{}, refuseWait(safety))
	tr, dials := countingH2(t, ca)
	rnd := rand.New(rand.NewPCG(3, 4))
	raw := make([]byte, 9<<10)
	for i := range raw {
		raw[i] = byte(rnd.Uint32())
	}
	cookie := base64.StdEncoding.EncodeToString(raw) // 12 KiB, some 9 KiB once Huffman-coded
	const n = 150                                    // some 1.4 MiB of heads: more than one refused connection reads
	ctx, cancel := context.WithTimeout(context.Background(), safety)
	defer cancel()
	var wg sync.WaitGroup
	statuses, tries := make([]int, n), make([]int, n)
	for i := range n {
		wg.Go(func() {
			req, _ := http.NewRequest("GET", "https://"+addr+"/v1/check", nil)
			req.Header.Set("Cookie", cookie)
			statuses[i], tries[i] = attempt(t, ctx, tr, req)
		})
	}
	wg.Wait()
	most := 0
	for i := range n {
		if statuses[i] != 0 && statuses[i] != http.StatusServiceUnavailable {
			t.Errorf("request %d over the cap: %d, want 503", i, statuses[i])
		}
		most = max(most, tries[i])
	}
	t.Logf("%d requests: %d connections dialled, a request tried at most %d times", n, dials.Load(), most)
	if most > 2 {
		t.Errorf("a request was tried %d times, want 2 at most: the third try comes after the transport's backoff", most)
	}
	// Each refused connection reads about 1 MiB of heads: two take the
	// 1.4 MiB sent; the transport may open one more before it knows the
	// server's stream limit.
	if d := dials.Load(); d > 4 {
		t.Errorf("%d connections dialled for %d requests, want 4 at most", d, n)
	}
}

// TestRefusedH2Steady: a client sending one request after another over a
// refused HTTP/2 connection has each answered 503 on it until the
// connection's bounded life nears its end, and then goes on over a new
// one, as the graceful GOAWAY tells it: no request fails or waits out a
// retry backoff, and a connection carries many requests, not one. Three
// connections: the first two have ended by their time bound, 4 s here,
// whose last half (for the answers in flight at the GOAWAY) a loaded
// machine's pause does not outlast.
func TestRefusedH2Steady(t *testing.T) {
	ca := tlstest.NewCA(t, "server")
	addr, _, _ := tlsCapped(t, ca, tlsconf.Options{}, refuseWait(4*time.Second))
	tr, dials := countingH2(t, ca)
	ctx, cancel := context.WithTimeout(context.Background(), safety)
	defer cancel()
	sent := 0
	for dials.Load() < 3 && ctx.Err() == nil && !t.Failed() {
		req, _ := http.NewRequest("GET", "https://"+addr+"/v1/check", nil)
		status, tries := attempt(t, ctx, tr, req)
		sent++
		if status != 0 && status != http.StatusServiceUnavailable {
			t.Errorf("request %d over the cap: %d, want 503", sent, status)
		}
		if tries > 2 {
			t.Errorf("request %d tried %d times, want 2 at most", sent, tries)
		}
	}
	t.Logf("%d requests over %d connections", sent, dials.Load())
	if d := dials.Load(); int64(sent) < 2*d {
		t.Errorf("%d requests over %d connections, want each refused connection to answer many", sent, d)
	}
}
