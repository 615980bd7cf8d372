package daemon

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
)

// TestXDSUpdatesWhileCallsInFlight: the xDS server sends version after
// version (a sibling added and dropped: a change that keeps the other
// limit's counters) while callers keep asking. Every call is answered,
// none fails; tenant=acme admits exactly its 100 over the whole run, as
// without updates; and sluice_envoy_hits_total counts each call once.
// Run with -race, it also checks the swap of the descriptors against the
// calls reading them.
func TestXDSUpdatesWhileCallsInFlight(t *testing.T) {
	x := startXDSServer(t)
	ed := startXDSDaemon(t, x)
	version := func(i int) {
		ds := []*rlsconf.RateLimitDescriptor{perDay("tenant", "acme", 100)}
		if i%2 == 1 {
			ds = append(ds, perDay("coupon", "", 1))
		}
		v := fmt.Sprint("v", i)
		x.set(v, rlc("shop", "shop", ds...))
		x.waitACK(v)
	}
	version(0)

	var calls, admitted, failed atomic.Int64
	done := make(chan struct{})
	enough := make(chan struct{}) // closed at 150 calls: past the limit
	var once sync.Once
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			req := &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*commonv3.RateLimitDescriptor{entries("tenant", "acme"), entries("coupon", "c")}}
			for {
				select {
				case <-done:
					return
				default:
				}
				r, err := ed.rls.ShouldRateLimit(context.Background(), req)
				if calls.Add(1) >= 150 {
					once.Do(func() { close(enough) })
				}
				switch {
				case err != nil:
					failed.Add(1)
					t.Errorf("a call during the updates: %v", err)
				case r.OverallCode == rlsv3.RateLimitResponse_OK:
					// Counted by tenant (a call that coupon, once
					// over, refuses counts nothing).
					admitted.Add(1)
				}
			}
		})
	}
	const updates = 12
	for i := 1; i <= updates; i++ {
		version(i)
	}
	<-enough
	close(done)
	wg.Wait()
	n := calls.Load()
	t.Logf("%d calls over %d updates", n, updates)
	if got := admitted.Load(); got != 100 {
		t.Errorf("tenant=acme admitted %d of %d calls over %d updates, want exactly 100: counters kept, none counted twice", got, n, updates)
	}
	if got := ed.metric("sluice_envoy_hits_total", "domain", "shop", "descriptor", "tenant_acme"); got != float64(n-failed.Load()) {
		t.Errorf("sluice_envoy_hits_total{tenant_acme} = %v, want %d (each call once)", got, n-failed.Load())
	}
}
