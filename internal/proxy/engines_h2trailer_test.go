package proxy_test

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/proxy"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// An HTTP/2 upstream's trailer (gRPC's grpc-status and grpc-message)
// reaches the client on every engine, declared or not, for a GET and a
// POST with a body (both through ReverseProxy: an https:// upstream has no
// fast path), through the proxy's own Transport and Options.Transport alike,
// and Te: trailers, without which a gRPC server refuses the call, reaches
// the upstream; a trailers-only answer (gRPC's error: one HEADERS frame
// that ends the stream) carries its grpc-status in its head.
func TestEngineHTTP2UpstreamTrailers(t *testing.T) {
	ca := tlstest.NewCA(t, "upstream")
	pair := ca.Server(t)
	var mu sync.Mutex
	protos, tes := map[string]bool{}, map[string]bool{}
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		protos[r.Proto], tes[r.Header.Get("Te")] = true, true
		mu.Unlock()
		io.Copy(io.Discard, r.Body)
		h := w.Header()
		h.Set("Content-Type", "application/grpc")
		if r.URL.Path == "/error" {
			h.Set("Grpc-Status", "5")
			h.Set("Grpc-Message", "not found")
			w.WriteHeader(http.StatusOK)
			return
		}
		h.Set("Trailer", "Grpc-Status, Grpc-Message")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "\x00\x00\x00\x00\x02ok")
		w.(http.Flusher).Flush()
		h.Set("Grpc-Status", "0")
		h.Set("Grpc-Message", "fine")
		h.Set(http.TrailerPrefix+"X-Late", "late") // undeclared
	}))
	up.TLS = &tls.Config{Certificates: []tls.Certificate{pair.TLS}}
	up.EnableHTTP2 = true
	up.StartTLS()
	t.Cleanup(up.Close)
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		o := engineOpts{proxy: proxy.Options{TLSClientConfig: ca.ClientConfig()}}
		if ec.rp {
			tr := &http.Transport{TLSClientConfig: ca.ClientConfig(), ForceAttemptHTTP2: true}
			t.Cleanup(tr.CloseIdleConnections)
			o.proxy.Transport = tr
		}
		s := startOn(t, ec, up.URL, o)
		for _, pa := range paths {
			req := request(t, s, pa.method, "/svc", pa.body)
			req.Header.Set("Content-Type", "application/grpc")
			req.Header.Set("Te", "trailers")
			resp, body := s.do(t, req)
			s.wantProto(t, resp)
			if resp.StatusCode != 200 || body != "\x00\x00\x00\x00\x02ok" {
				t.Errorf("%s: %d %q, want 200 and the upstream's message", pa.name, resp.StatusCode, body)
			}
			if st, msg, late := resp.Trailer.Get("Grpc-Status"), resp.Trailer.Get("Grpc-Message"), resp.Trailer.Get("X-Late"); st != "0" || msg != "fine" || late != "late" {
				t.Errorf("%s: trailer %v, want Grpc-Status 0, Grpc-Message fine and the undeclared X-Late", pa.name, resp.Trailer)
			}
			req = request(t, s, pa.method, "/error", pa.body)
			req.Header.Set("Te", "trailers")
			if resp, _ := s.do(t, req); resp.StatusCode != 200 || resp.Header.Get("Grpc-Status") != "5" || resp.Header.Get("Grpc-Message") != "not found" {
				t.Errorf("%s, trailers-only: %d, head %v; want 200 with Grpc-Status 5 and its message", pa.name, resp.StatusCode, resp.Header)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if !protos["HTTP/2.0"] || protos["HTTP/1.1"] {
			t.Errorf("the upstream was spoken to over %v, want HTTP/2 alone", protos)
		}
		if !tes["trailers"] || len(tes) != 1 {
			t.Errorf("the upstream got Te %v, want trailers on every request", tes)
		}
	})
}
