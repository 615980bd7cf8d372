package server_test

import (
	"net/http"
	"net/netip"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/memstore"
)

// headerAtWrite is an http.ResponseWriter that keeps a copy of the header
// map as it was when WriteHeader was called: what the h1 front commits
// then.
type headerAtWrite struct {
	h, atWrite http.Header
	code       int
}

func (w *headerAtWrite) Header() http.Header { return w.h }
func (w *headerAtWrite) WriteHeader(code int) {
	if w.code == 0 {
		w.code, w.atWrite = code, w.h.Clone()
	}
}

func (w *headerAtWrite) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return len(p), nil
}

// An allowed forward-auth answer declares its empty body (Content-Length:
// 0) before WriteHeader, so that the h1 front writes its head at once
// instead of copying the header map to decide the length after the
// handler returns; the bytes on the wire are net/http's either way. A
// HEAD's answer declares none, as net/http sends none for it.
func TestForwardAuthAllowedDeclaresLength(t *testing.T) {
	set, err := rules.Compile("t.yaml", []rules.Spec{{Name: "per-client", Key: []string{"ip"}, Rate: "100/s", Algorithm: "token_bucket"}})
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(engine.Options{Store: memstore.New(memstore.Options{}), Rules: set, Metrics: metrics.New(prometheus.NewRegistry())})
	if err != nil {
		t.Fatal(err)
	}
	h, err := server.New(server.Options{
		Engine:   func() *engine.Engine { return e },
		ClientIP: clientip.Resolver{Trusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method string
		want   []string
	}{{"GET", []string{"0"}}, {"HEAD", nil}} {
		req, err := http.NewRequest(tc.method, "http://sluice/v1/forward-auth", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.RemoteAddr = "127.0.0.1:40000"
		req.Header.Set("X-Forwarded-Method", "GET")
		req.Header.Set("X-Forwarded-Uri", "/items")
		req.Header.Set("X-Forwarded-For", "198.51.100.7")
		w := &headerAtWrite{h: http.Header{}}
		h.ServeHTTP(w, req)
		if w.code != http.StatusOK {
			t.Fatalf("%s: status %d, want 200", tc.method, w.code)
		}
		if got := w.atWrite["X-Ratelimit-Remaining"]; len(got) != 1 {
			t.Errorf("%s: X-RateLimit-Remaining at WriteHeader %q, want one value", tc.method, got)
		}
		if got := w.atWrite["Content-Length"]; !slices.Equal(got, tc.want) {
			t.Errorf("%s: Content-Length at WriteHeader %q, want %q", tc.method, got, tc.want)
		}
	}
}
