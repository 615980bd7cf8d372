package server_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/benchutil"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/memstore"
)

// bareCheck is the yardstick of the performance target: a plain
// net/http handler that decodes and encodes the same JSON as /v1/check,
// with encoding/json, and decides nothing.
func bareCheck(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Rule string `json:"rule"`
		Key  string `json:"key"`
		Cost int64  `json:"cost"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	resp := struct {
		Allowed      bool  `json:"allowed"`
		Limit        int64 `json:"limit"`
		Remaining    int64 `json:"remaining"`
		RetryAfterMS int64 `json:"retry_after_ms"`
		ResetAfterMS int64 `json:"reset_after_ms"`
	}{true, 1000, 999, 0, 60000}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(resp)
}

func benchHandler(b *testing.B) http.Handler {
	set, err := rules.Compile("bench.yaml", []rules.Spec{{Name: "api", Key: []string{"header:X-Api-Key"}, Rate: "1000000000/s", Algorithm: "gcra"}})
	if err != nil {
		b.Fatal(err)
	}
	e, err := engine.New(engine.Options{Store: memstore.New(memstore.Options{}), Rules: set, Metrics: metrics.New(prometheus.NewRegistry())})
	if err != nil {
		b.Fatal(err)
	}
	h, err := server.New(server.Options{Engine: func() *engine.Engine { return e }})
	if err != nil {
		b.Fatal(err)
	}
	return h
}

// Server-side work only: the handler called directly, no network.
func BenchmarkCheckHandler(b *testing.B) {
	for _, tc := range []struct {
		name string
		h    func(*testing.B) http.Handler
	}{
		{"bare", func(*testing.B) http.Handler { return http.HandlerFunc(bareCheck) }},
		{"sluice", benchHandler},
	} {
		b.Run(tc.name, func(b *testing.B) {
			h := tc.h(b)
			var n atomic.Int64
			b.ReportAllocs()
			defer benchutil.ReportCPU(b)()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					body := []byte(`{"rule":"api","key":"user-` + strconv.FormatInt(n.Add(1)%1000, 10) + `","cost":1}`)
					req := httptest.NewRequest("POST", "/v1/check", bytes.NewReader(body))
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, req)
					if rec.Code != 200 {
						b.Fatalf("status %d: %s", rec.Code, rec.Body)
					}
				}
			})
		})
	}
}

// Whole round trips over loopback through net/http, client included.
func BenchmarkCheckLoopback(b *testing.B) {
	for _, tc := range []struct {
		name string
		h    func(*testing.B) http.Handler
	}{
		{"bare", func(*testing.B) http.Handler { return http.HandlerFunc(bareCheck) }},
		{"sluice", benchHandler},
	} {
		b.Run(tc.name, func(b *testing.B) {
			srv := httptest.NewServer(tc.h(b))
			defer srv.Close()
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			var n atomic.Int64
			b.ReportAllocs()
			defer benchutil.ReportCPU(b)()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					body := `{"rule":"api","key":"user-` + strconv.FormatInt(n.Add(1)%1000, 10) + `","cost":1}`
					resp, err := client.Post(srv.URL+"/v1/check", "application/json", bytes.NewReader([]byte(body)))
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
