package fleet_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/memstore"
)

// BenchmarkFallbackLocalTake is local mode's Take (an outage): the memory
// store's decision at the local share and what the Fallback notes of it.
// hot: one key; keys: 4096 keys in turn, each admitted.
func BenchmarkFallbackLocalTake(b *testing.B) {
	down := func(context.Context) error { return errDown }
	for _, c := range []struct {
		name string
		keys int
	}{{"hot", 1}, {"keys", 4096}} {
		b.Run(c.name, func(b *testing.B) {
			f := fleet.NewFallback(memstore.New(memstore.Options{}), fleet.FallbackOptions{ExpectedInstances: 3, StartLocal: true, ProbeInterval: time.Hour, Probe: down})
			defer f.Close()
			rs := make([]sluice.Request, c.keys)
			for i := range rs {
				rs[i] = sluice.Request{Key: fmt.Sprintf("fallbackbench/%d", i), Algorithm: sluice.FixedWindow, Limit: sluice.PerSecond(1 << 40), Cost: 1}
			}
			ctx := context.Background()
			now := time.Now()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				r := &rs[i%len(rs)]
				r.Now = now
				if d, err := f.Take(ctx, *r); err != nil || !d.Allowed {
					b.Fatalf("Take = %+v, %v", d, err)
				}
				i++
			}
		})
	}
}
