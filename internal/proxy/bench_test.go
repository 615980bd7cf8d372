package proxy_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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
			defer reportCPU(b)()
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

// reportCPU reports the process CPU time (user + system) per operation as
// cpu-ns/op; client, proxy and upstream all run in this process.
func reportCPU(b *testing.B) func() {
	before := cpuTime()
	b.ResetTimer()
	return func() {
		b.StopTimer()
		b.ReportMetric(float64(cpuTime()-before)/float64(b.N), "cpu-ns/op")
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
