package engine_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/metrics/metricstest"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/memstore"
)

// refundFails is a memory store whose refunds fail, as Redis's do while
// it is unreachable.
type refundFails struct{ *memstore.Store }

func (refundFails) Refund(context.Context, sluice.Request) (sluice.Decision, error) {
	return sluice.Decision{}, errors.New("store down")
}

// TestGiveBackFailureCounted: a request gone while it waits out its
// slot gives the slot back; when the store cannot, the slot stays
// counted, and that is a store failure like any other (counted in
// sluice_store_errors_total, logged), not silence.
func TestGiveBackFailureCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shaped := rule("shaped", sluice.LeakyBucket, sluice.PerSecond(1).WithBurst(5), rules.Delay, 5*time.Second)
		reg := prometheus.NewRegistry()
		e, err := engine.New(engine.Options{Store: refundFails{memstore.New(memstore.Options{})}, Rules: &rules.Set{Rules: []*rules.Rule{shaped}}, Metrics: metrics.New(reg)})
		if err != nil {
			t.Fatal(err)
		}
		ms := []rules.Match{{Rule: shaped, Key: "s"}}
		if res := e.Decide(context.Background(), ms, 1); !res.Allowed { // the slot leaving now
			t.Fatal("first request: denied")
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan engine.Result)
		go func() { done <- e.Admit(ctx, ms, 1) }() // its slot at 1s
		synctest.Wait()
		cancel()
		if res := <-done; res.Allowed {
			t.Fatal("request gone while it waited: allowed")
		}
		wantCounts(t, "a give-back the store refused", metricstest.Gather(t, reg), map[string]float64{
			`sluice_store_errors_total`:                    1,
			`sluice_delay_given_back_total{rule="shaped"}`: 0,
		})
	})
}
