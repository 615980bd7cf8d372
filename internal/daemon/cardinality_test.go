package daemon

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestMetricsCardinalityUnderClients: what clients send never becomes a
// label. A real daemon (decision API, proxy, forward auth, the Envoy
// service over gRPC and POST /json) gets 10,000 requests, each with a
// key, path, method, upstream status, descriptor value, domain and rule
// name it has never seen; the scrape after them holds exactly the series
// it held before. The Envoy labels that carry request values
// (detailed_metric, value_to_metric, limit overrides) are bounded by
// design at metrics.MaxDetailedDescriptors: the warm-up fills them, and
// then they must not grow either.
func TestMetricsCardinalityUnderClients(t *testing.T) {
	// Its fixed windows count in hours since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Whatever status the path asks for: the upstream's status must
		// not become a label either.
		code, err := strconv.Atoi(r.URL.Query().Get("status"))
		if err != nil || code < 200 || code > 599 {
			code = http.StatusOK
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(up.Close)
	dir := t.TempDir()
	desc := `domain: d
descriptors:
  - key: user
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: tenant
    value_to_metric: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: route
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: path
    value: /img/*
    rate_limit: {unit: hour, requests_per_unit: 2}
`
	if err := os.WriteFile(filepath.Join(dir, "rl.yaml"), []byte(desc), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sluice.yaml")
	yaml := fmt.Sprintf(`listen: 127.0.0.1:0
proxy: {listen: 127.0.0.1:0, upstream: %s}
grpc: {listen: 127.0.0.1:0, config: [rl.yaml]}
rules:
  - name: per-key
    key: [header:X-Api-Key]
    rate: 2/h
    algorithm: fixed_window
  - name: per-path
    match: {path: /p/*}
    key: [path, method]
    rate: 2/h
    algorithm: sliding_window_counter
  - name: per-query
    key: [query:u]
    rate: 2/h
    action: shadow
  - name: checked
    rate: 2/h
    algorithm: gcra
`, up.URL)
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	ed := dialEnvoy(t, startDaemonFile(t, path))

	// One request of each kind, numbered n: every value in it is new.
	kinds := []func(t *testing.T, n int){
		func(t *testing.T, n int) { // the decision API: a new key, then a rule that does not exist
			send(t, http.MethodPost, ed.api+"/v1/check", fmt.Sprintf(`{"rule":"checked","key":"k%d"}`, n))
			send(t, http.MethodPost, ed.api+"/v1/check", fmt.Sprintf(`{"rule":"no-such-rule-%d","key":"k"}`, n))
		},
		func(t *testing.T, n int) { // the proxy: a new path, method, key, query value and upstream status
			method := "M" + strconv.Itoa(n)
			if n%2 == 0 {
				method = http.MethodGet
			}
			send(t, method, fmt.Sprintf("%s/p/%d?u=%d&status=%d", ed.proxy, n, n, 200+n%400), "", "X-Api-Key", "key-"+strconv.Itoa(n))
		},
		func(t *testing.T, n int) { // forward auth: a new original method, URI and key
			send(t, http.MethodGet, ed.api+"/v1/forward-auth", "", "X-Forwarded-Method", "F"+strconv.Itoa(n),
				"X-Forwarded-Uri", fmt.Sprintf("/p/fa%d?u=%d", n, n), "X-Api-Key", "fa-"+strconv.Itoa(n))
		},
		func(t *testing.T, n int) { // gRPC: new values in every descriptor, a new domain, a limit override
			v := strconv.Itoa(n)
			lim := entries("route", "r"+v)
			lim.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: uint32(n%50 + 1), Unit: typev3.RateLimitUnit_HOUR}
			if _, err := ed.rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{
				entries("user", "u"+v), entries("tenant", "t"+v), entries("route", "r"+v), entries("path", "/img/"+v), entries("k"+v, "v"+v), lim}}); err != nil {
				t.Errorf("ShouldRateLimit: %v", err)
			}
			if _, err := ed.rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "dom-" + v, Descriptors: []*commonv3.RateLimitDescriptor{entries("user", "u"+v)}}); err != nil {
				t.Errorf("ShouldRateLimit(unknown domain): %v", err)
			}
		},
		func(t *testing.T, n int) { // POST /json, the service's HTTP form
			send(t, http.MethodPost, ed.api+"/json", fmt.Sprintf(`{"domain":"d","descriptors":[{"entries":[{"key":"user","value":"j%d"}]},{"entries":[{"key":"tenant","value":"j%d"}]}]}`, n, n))
		},
	}
	run := func(from, to int) {
		var wg sync.WaitGroup
		next := make(chan int)
		for range 4 {
			wg.Go(func() {
				for n := range next {
					kinds[n%len(kinds)](t, n)
				}
			})
		}
		for n := from; n < to; n++ {
			next <- n
		}
		close(next)
		wg.Wait()
	}

	// Warm-up: every kind of request, and the Envoy labels that carry
	// request values filled to their bound.
	run(0, 2*metrics.MaxDetailedDescriptors) // 400 gRPC and 400 /json requests: 2,000 detailed labels asked for
	before := scrape(t, ed.api+"/metrics")
	if got := before["sluice_envoy_hits_total"].value("sluice_envoy_hits_total", "descriptor", "_other"); got == 0 {
		t.Fatalf("after the warm-up, no Envoy hit is counted under _other: the detailed labels are not full yet")
	}
	const n = 10000
	run(1_000_000, 1_000_000+n)
	if t.Failed() {
		return
	}
	after := scrape(t, ed.api+"/metrics")

	if b, a := series(before), series(after); a != b {
		t.Errorf("/metrics held %d series before %d requests with values never seen, %d after; want no growth", b, n, a)
		for name, f := range after {
			if nb := len(before[name].samplesOrNil()); nb != len(f.samples) {
				t.Errorf("  %s: %d series before, %d after", name, nb, len(f.samples))
			}
		}
	}
	// Whatever the requests named, labels hold configured names only, and
	// no label value any client sent.
	var bad []string
	for name, f := range after {
		for _, s := range f.samples {
			for l, v := range s.labels {
				if l == "descriptor" || l == "key" || l == "le" || l == "quantile" {
					continue // request values by design, bounded (above); buckets
				}
				if strings.Contains(v, "1000") || strings.HasPrefix(v, "M") || strings.HasPrefix(v, "F") || strings.HasPrefix(v, "dom-") || strings.HasPrefix(v, "no-such") {
					bad = append(bad, fmt.Sprintf("%s{%s=%q}", name, l, v))
				}
			}
		}
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Errorf("a label holds a client's value: %s", b)
	}
	// The hot keys are clients' keys by design: the top 10 of each rule.
	if k := len(after["sluice_hot_key_rate"].samplesOrNil()); k > 10*4 {
		t.Errorf("sluice_hot_key_rate has %d series, want at most 10 per rule (40)", k)
	}
}

// send sends a request and reads its answer, whatever its status; a
// failure to send is an error of t (not fatal: send runs in goroutines).
func send(t *testing.T, method, url, body string, header ...string) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Error(err)
		return
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, url, err)
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// samplesOrNil returns f's samples, none for a nil f.
func (f *family) samplesOrNil() []sample {
	if f == nil {
		return nil
	}
	return f.samples
}
