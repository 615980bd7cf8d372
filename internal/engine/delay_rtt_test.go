package engine_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/internal/storetest"
)

// TestDelaySlotWithinMaxDelayOverRoundTrip: a delay rule whose queue
// (burst 2 at 10/s: 200ms) fits in its max_delay (210ms), so that no
// question comes before the take, on a store whose answers take 20ms to
// come back. A request whose slot leaves 200ms after the decision is
// within max_delay, and is admitted when the slot leaves: the round trip
// is part of its wait. It used to be added to it, 220ms, past max_delay:
// the request was refused, its slot counted all the same.
func TestDelaySlotWithinMaxDelayOverRoundTrip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shaped := rule("shaped", sluice.LeakyBucket, sluice.PerSecond(10).WithBurst(2), rules.Delay, 210*time.Millisecond)
		st := storetest.NewRoundTrip()
		e, err := engine.New(engine.Options{Store: st, Rules: &rules.Set{Rules: []*rules.Rule{shaped}}, Metrics: metrics.New(prometheus.NewRegistry())})
		if err != nil {
			t.Fatal(err)
		}
		ms := []rules.Match{{Rule: shaped, Key: "s"}}
		var wg sync.WaitGroup
		for range 2 { // slots leaving at 0 and 100ms
			wg.Go(func() { e.Admit(context.Background(), ms, 1) })
		}
		synctest.Wait()
		st.SetRTT(20 * time.Millisecond)
		start := time.Now()
		res := e.Admit(context.Background(), ms, 1)
		if after := time.Since(start); !res.Allowed || after != 200*time.Millisecond {
			t.Errorf("a slot leaving 200ms after the decision, max_delay 210ms, answers taking 20ms: allowed %v after %v (retry after %v); want allowed after 200ms", res.Allowed, after, res.Decision.RetryAfter)
		}
		wg.Wait()
	})
}
