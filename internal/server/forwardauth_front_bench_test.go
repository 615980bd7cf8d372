package server_test

import (
	"bytes"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/internal/benchutil"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/h1"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/memstore"
)

// forwardAuthHandler is the handler of BenchmarkForwardAuthHandler: one
// rule per client address, the client from a trusted gateway's
// X-Forwarded-For.
func forwardAuthHandler(b *testing.B) http.Handler {
	set, err := rules.Compile("bench.yaml", []rules.Spec{{Name: "per-client", Key: []string{"ip"}, Rate: "1000000000/s", Algorithm: "token_bucket"}})
	if err != nil {
		b.Fatal(err)
	}
	e, err := engine.New(engine.Options{Store: memstore.New(memstore.Options{}), Rules: set, Metrics: metrics.New(prometheus.NewRegistry())})
	if err != nil {
		b.Fatal(err)
	}
	h, err := server.New(server.Options{
		Engine:   func() *engine.Engine { return e },
		ClientIP: clientip.Resolver{Trusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}},
	})
	if err != nil {
		b.Fatal(err)
	}
	return h
}

// The handler alone, as the h1 front calls it: one request and one
// writer per goroutine, reused from question to question (the front
// reuses its answer's header map), so allocs/op and B/op are the
// handler's own, without httptest's request parsing and recorder.
func BenchmarkForwardAuthHandlerAlone(b *testing.B) {
	h := forwardAuthHandler(b)
	var n atomic.Int64
	b.ReportAllocs()
	defer benchutil.ReportCPU(b)()
	b.RunParallel(func(pb *testing.PB) {
		req, _ := http.NewRequest("GET", "http://sluice/v1/forward-auth", nil)
		req.RequestURI = "/v1/forward-auth"
		req.RemoteAddr = "127.0.0.1:40000"
		req.Header = http.Header{
			"X-Forwarded-Method": {"GET"},
			"X-Forwarded-Uri":    {"/items?page=1"},
			"X-Forwarded-Host":   {"api.example.com"},
			"X-Forwarded-For":    {""},
			"User-Agent":         {"curl/8.0"},
			"Accept":             {"*/*"},
		}
		ips := make([]string, 250)
		for i := range ips {
			ips[i] = "198.51.100." + strconv.Itoa(i)
		}
		w := &discardWriter{h: http.Header{}}
		for pb.Next() {
			req.Header["X-Forwarded-For"][0] = ips[n.Add(1)%250]
			clear(w.h)
			w.code = 0
			h.ServeHTTP(w, req)
			if w.code != http.StatusOK {
				b.Fatalf("status %d", w.code)
			}
		}
	})
}

// discardWriter is an http.ResponseWriter that keeps the status only.
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

func (w *discardWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return len(p), nil
}

// A forward-auth question as nginx's auth_request sends it
// (examples/gateways/nginx), through the h1 front over loopback, from a
// raw client that allocates nothing: allocs/op and B/op are the server's
// (front and handler), and -cpuprofile shows the front's share.
func BenchmarkForwardAuthFront(b *testing.B) {
	front := h1.New(&http.Server{Handler: forwardAuthHandler(b)})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go front.Serve(ln)
	defer front.Close()
	reqs := forwardAuthRequests()
	var n atomic.Int64
	b.ReportAllocs()
	defer benchutil.ReportCPU(b)()
	benchutil.Clients(b, ln.Addr().String(), 4, func() []byte { return reqs[n.Add(1)%250] }, func(answer []byte) bool {
		return bytes.Contains(answer, []byte("\r\nContent-Length: 0\r\n")) // allowed: no body
	})
}

// forwardAuthRequests returns nginx-style forward-auth questions from 250
// client addresses, one per connection's turn, for the benchmarks.
func forwardAuthRequests() [][]byte {
	reqs := make([][]byte, 250)
	for i := range reqs {
		reqs[i] = []byte("GET /v1/forward-auth HTTP/1.1\r\n" +
			"X-Forwarded-Method: GET\r\n" +
			"X-Forwarded-Uri: /items?page=1\r\n" +
			"X-Forwarded-Host: api.example.com\r\n" +
			"X-Forwarded-For: 198.51.100." + strconv.Itoa(i) + "\r\n" +
			"Host: sluice\r\n" +
			"User-Agent: curl/8.0\r\n" +
			"Accept: */*\r\n\r\n")
	}
	return reqs
}
