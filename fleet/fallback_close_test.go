package fleet_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
)

// TestFallbackCloseDuringProbe: a Close that waits for a probe, which
// finds the store back, and a request that then fails on the store and
// would start the next probe. Close's wait and that start must not race
// (go test -race), and no probe may run after Close.
func TestFallbackCloseDuringProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &flaky{}
		s.down.Store(true)
		var probes atomic.Int64
		probe := func(context.Context) error {
			probes.Add(1)
			time.Sleep(2 * time.Second) // a slow answer, whatever the context
			return nil
		}
		f := fleet.NewFallback(s, fleet.FallbackOptions{ProbeInterval: time.Second, Probe: probe, StartLocal: true})
		time.Sleep(1500 * time.Millisecond) // the first probe is under way
		closed := make(chan struct{})
		go func() {
			f.Close()
			close(closed)
		}()
		time.Sleep(2 * time.Second) // the probe found the store back
		r := sluice.Request{Key: "k", Algorithm: sluice.TokenBucket, Limit: sluice.PerSecond(5), Cost: 1, Now: time.Now()}
		if d, err := f.Take(context.Background(), r); err != nil || d.Limit != 5 {
			t.Fatalf("Take with the store down = %+v, %v; want a local decision", d, err)
		}
		<-closed
		time.Sleep(10 * time.Second)
		if p := probes.Load(); p != 1 {
			t.Errorf("%d probes, want 1: none after Close", p)
		}
	})
}
