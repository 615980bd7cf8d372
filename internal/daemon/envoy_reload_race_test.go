package daemon

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestEnvoyReloadWhileCallsInFlight: the descriptor file reloaded again
// and again (a sibling added and dropped, the limit renamed: changes
// that keep its counters) while callers keep asking on Redis. Every call
// is answered, none fails; the limit admits exactly its 100 over the
// whole run, as without reloads (no counter started afresh, none counted
// twice); and sluice_envoy_hits_total counts each call once. Run with
// -race, it also checks the swap of the descriptors against the calls
// reading them.
func TestEnvoyReloadWhileCallsInFlight(t *testing.T) {
	const base = `domain: shop
descriptors:
  - key: region
    rate_limit: {unit: year, requests_per_unit: 100, name: NAME}
`
	versions := []string{
		strings.ReplaceAll(base, "NAME", "per_region"),
		strings.ReplaceAll(base, "NAME", "regional") + "  - key: coupon\n    rate_limit: {unit: year, requests_per_unit: 1}\n",
	}
	dir := t.TempDir()
	ed, _ := startEnvoyRedis(t, dir, versions[0])
	conf := filepath.Join(dir, "fleet.yaml")

	// Counted by region (a call that coupon, once over, refuses counts
	// nothing).
	req := &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*commonv3.RateLimitDescriptor{entries("region", "eu"), entries("coupon", "c")}}
	const reloads = 12
	n, admitted, failed := askDuring(t, ed, req, func() {
		for i := 1; i <= reloads; i++ {
			replaceFile(t, conf, versions[i%2])
			if r := ed.waitReload(); r.Err != nil {
				t.Errorf("reload %d: %v", i, r.Err)
				return
			}
		}
	})
	if r := ed.d.descriptorSet().Rules(); r != 1 {
		t.Errorf("after the last reload, %d rules in force, want 1 (the first version)", r)
	}
	t.Logf("%d calls over %d reloads", n, reloads)
	if admitted != 100 {
		t.Errorf("region admitted %d of %d calls over %d reloads, want exactly 100: counters kept, none counted twice", admitted, n, reloads)
	}
	if got := ed.metric("sluice_envoy_hits_total", "domain", "shop", "descriptor", "region"); got != float64(n-failed) {
		t.Errorf("sluice_envoy_hits_total{region} = %v, want %d (each call once)", got, n-failed)
	}
}

// askDuring has 8 callers ask req of ed again and again while change
// runs, and until at least 150 calls were made (past a limit of 100);
// then, every call returned (so each refused call's refund made), one
// caller asks on until a call is refused: quota a refund gave back as the
// callers stopped is spent too, so a limit kept whole admits all of it.
// It returns the calls made, those answered OK and those that failed
// (each failure an error of t).
func askDuring(t *testing.T, ed *envoyDaemon, req *rlsv3.RateLimitRequest, change func()) (calls, admitted, failed int64) {
	t.Helper()
	var nCalls, nAdmitted, nFailed atomic.Int64
	done := make(chan struct{})
	enough := make(chan struct{}) // closed at 150 calls: past the limit
	var once sync.Once
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				r, err := ed.rls.ShouldRateLimit(context.Background(), req)
				if nCalls.Add(1) >= 150 {
					once.Do(func() { close(enough) })
				}
				switch {
				case err != nil:
					nFailed.Add(1)
					t.Errorf("a call during the changes: %v", err)
				case r.OverallCode == rlsv3.RateLimitResponse_OK:
					nAdmitted.Add(1)
				}
			}
		})
	}
	stop := sync.OnceFunc(func() { close(done); wg.Wait() })
	defer stop() // also when change ends the test (t.Fatal)
	change()
	<-enough
	stop()
	for range 101 { // a limit of 100 refuses by the 101st
		r, err := ed.rls.ShouldRateLimit(context.Background(), req)
		nCalls.Add(1)
		if err != nil {
			nFailed.Add(1)
			t.Errorf("a call after the changes: %v", err)
			continue
		}
		if r.OverallCode != rlsv3.RateLimitResponse_OK {
			break
		}
		nAdmitted.Add(1)
	}
	return nCalls.Load(), nAdmitted.Load(), nFailed.Load()
}
