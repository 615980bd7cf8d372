package server_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/internal/benchutil"
)

// Server-side work of one /v1/forward-auth question as nginx asks it
// (examples/gateways/nginx): the handler called directly, no network, the
// client's address from a trusted gateway's X-Forwarded-For, one rule per
// client address.
func BenchmarkForwardAuthHandler(b *testing.B) {
	h := forwardAuthHandler(b)
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
