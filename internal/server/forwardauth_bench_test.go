package server_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/internal/benchutil"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/memstore"
)

// Server-side work of one /v1/forward-auth question as nginx asks it
// (examples/gateways/nginx): the handler called directly, no network, the
// client's address from a trusted gateway's X-Forwarded-For, one rule per
// client address.
func BenchmarkForwardAuthHandler(b *testing.B) {
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
	var n atomic.Int64
	b.ReportAllocs()
	defer benchutil.ReportCPU(b)()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req := httptest.NewRequest("GET", "/v1/forward-auth", nil)
			req.RemoteAddr = "127.0.0.1:40000"
			req.Header.Set("X-Forwarded-Method", "GET")
			req.Header.Set("X-Forwarded-Uri", "/items?page=1")
			req.Header.Set("X-Forwarded-Host", "api.example.com")
			req.Header.Set("X-Forwarded-For", "198.51.100."+strconv.FormatInt(n.Add(1)%250, 10))
			req.Header.Set("User-Agent", "curl/8.0")
			req.Header.Set("Accept", "*/*")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				b.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
		}
	})
}
