package proxy_test

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/benchutil"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/h1"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/proxy"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/memstore"
)

// Round trips over loopback: straight to the upstream, and through the
// proxy with one per-IP rule on the memory store.
func BenchmarkProxy(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello\n")
	}))
	defer up.Close()
	set, err := rules.Compile("bench.yaml", []rules.Spec{{Name: "per-ip", Rate: "1000000000/s", Algorithm: "gcra"}})
	if err != nil {
		b.Fatal(err)
	}
	e, err := engine.New(engine.Options{Store: memstore.New(memstore.Options{}), Rules: set, Metrics: metrics.New(prometheus.NewRegistry())})
	if err != nil {
		b.Fatal(err)
	}
	u, _ := url.Parse(up.URL)
	p, err := proxy.New(proxy.Options{Upstream: u, Engine: func() *engine.Engine { return e }})
	if err != nil {
		b.Fatal(err)
	}
	through := httptest.NewServer(p)
	defer through.Close()
	// The same proxy with no rules: the cost of proxying alone.
	bare, _ := engine.New(engine.Options{Store: memstore.New(memstore.Options{})})
	p0, err := proxy.New(proxy.Options{Upstream: u, Engine: func() *engine.Engine { return bare }})
	if err != nil {
		b.Fatal(err)
	}
	norules := httptest.NewServer(p0)
	defer norules.Close()
	// The same proxy behind the h1 front, as the daemon serves it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	front := h1.New(&http.Server{Handler: p})
	go front.Serve(ln)
	defer front.Close()
	for _, tc := range []struct{ name, url string }{{"direct", up.URL}, {"proxy-no-rules", norules.URL}, {"proxy", through.URL}, {"proxy-h1-front", "http://" + ln.Addr().String()}} {
		b.Run(tc.name, func(b *testing.B) {
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			b.ReportAllocs()
			defer benchutil.ReportCPU(b)()
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := client.Get(tc.url + "/bench")
					if err != nil {
						b.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Fatalf("status %d", resp.StatusCode)
					}
				}
			})
		})
	}
}

// The proxy behind the h1 front, as the daemon serves it, between a raw
// client and a raw upstream that allocate nothing: allocs/op and the
// profile (-cpuprofile) are the proxy's own.
func BenchmarkFront(b *testing.B) {
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer upLn.Close()
	go rawUpstream(upLn)
	set, err := rules.Compile("bench.yaml", []rules.Spec{{Name: "bench", Key: []string{"ip"}, Rate: "1000000000/s", Algorithm: "token_bucket"}})
	if err != nil {
		b.Fatal(err)
	}
	e, err := engine.New(engine.Options{Store: memstore.New(memstore.Options{}), Rules: set, Metrics: metrics.New(prometheus.NewRegistry())})
	if err != nil {
		b.Fatal(err)
	}
	u, _ := url.Parse("http://" + upLn.Addr().String())
	p, err := proxy.New(proxy.Options{Upstream: u, Engine: func() *engine.Engine { return e }})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	front := h1.New(&http.Server{Handler: p})
	go front.Serve(ln)
	defer front.Close()
	req := []byte("GET /bench HTTP/1.1\r\nHost: sluice.test\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n")
	b.ReportAllocs()
	defer benchutil.ReportCPU(b)()
	benchutil.Clients(b, ln.Addr().String(), 8, func() []byte { return req }, func(answer []byte) bool {
		return bytes.Contains(answer, []byte("\r\nContent-Length: ")) // the upstream's body, whole
	})
}

// rawUpstream answers every request head on its connections with the
// same small answer net/http would give, allocating nothing per request.
func rawUpstream(ln net.Listener) {
	answer := []byte("HTTP/1.1 200 OK\r\nContent-Length: 20\r\nContent-Type: text/plain\r\nDate: Mon, 23 Nov 2026 19:00:00 GMT\r\n\r\nhello from upstream\n")
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			buf := make([]byte, 8192)
			n := 0
			for {
				m, err := c.Read(buf[n:])
				if err != nil {
					return
				}
				n += m
				for {
					i := bytes.Index(buf[:n], []byte("\r\n\r\n"))
					if i < 0 {
						break
					}
					if _, err := c.Write(answer); err != nil {
						return
					}
					n = copy(buf, buf[i+4:n])
				}
			}
		}()
	}
}
