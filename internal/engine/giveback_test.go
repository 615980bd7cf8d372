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
	"github.com/sluicehq/sluice/internal/metrics/metricstest"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/internal/storetest"
	"github.com/sluicehq/sluice/memstore"
)

// refundGated is storetest.Gated with memstore's sluice.Refunder.
type refundGated struct{ *storetest.Gated }

func (g refundGated) Refund(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	return g.S.Refund(ctx, r)
}

// TestDelayRaceLoserGivesBack: two requests of one key ask a delay rule's
// queue (longer than max_delay) together, both see a slot in time, and
// both take: the loser's slot leaves past max_delay, so it is refused,
// and gives back all it took (its slot and its other rules' counts): a
// refused request consumes nothing. It used to keep both, so the next
// request queued a spacing later and the hourly rule counted a request
// that was refused.
func TestDelayRaceLoserGivesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shaped := rule("shaped", sluice.LeakyBucket, sluice.PerSecond(10).WithBurst(20), rules.Delay, 250*time.Millisecond)
		hourly := rule("hourly", sluice.FixedWindow, sluice.PerHour(100), rules.Reject, 0)
		g := storetest.NewGated()
		reg := prometheus.NewRegistry()
		e, err := engine.New(engine.Options{Store: refundGated{g}, Rules: &rules.Set{Rules: []*rules.Rule{shaped, hourly}}, Metrics: metrics.New(reg)})
		if err != nil {
			t.Fatal(err)
		}
		ms := []rules.Match{{Rule: shaped, Key: "s"}, {Rule: hourly, Key: "h"}}
		for i := range 2 { // slots leaving at 0 and 100ms
			if res := e.Decide(context.Background(), ms, 1); !res.Allowed {
				t.Fatalf("request %d filling the queue: denied", i)
			}
		}
		g.Arm(2) // both questions answered before either takes
		var wg sync.WaitGroup
		results := make([]engine.Result, 2)
		for i := range results {
			wg.Go(func() { results[i] = e.Admit(context.Background(), ms, 1) })
		}
		wg.Wait()
		if results[0].Allowed == results[1].Allowed {
			t.Fatalf("two requests racing for the slot at 200ms: allowed %v and %v, want one of each", results[0].Allowed, results[1].Allowed)
		}
		// At 200ms (the winner left) the queue holds the slots at 0,
		// 100ms and 200ms: a new request leaves at 300ms.
		if res := e.Decide(context.Background(), ms[:1], 1); !res.Allowed || res.Decision.Delay != 100*time.Millisecond {
			t.Errorf("request after the race: allowed %v with delay %v, want delay 100ms (the loser's slot given back)", res.Allowed, res.Decision.Delay)
		}
		if res := e.Decide(context.Background(), ms[1:], 0); res.Decision.Remaining != 97 {
			t.Errorf("hourly rule after 3 admitted requests and 1 refused: %d remaining, want 97", res.Decision.Remaining)
		}
		if got := metricstest.Gather(t, reg)[`sluice_delay_given_back_total{rule="shaped"}`]; got != 1 {
			t.Errorf(`sluice_delay_given_back_total{rule="shaped"} = %v, want 1 (the loser's slot)`, got)
		}
	})
}

// TestGoneKeepsSlotThatLeft: a request delayed by two leaky bucket rules
// waits for the later slot; gone between the two, it gives back the slot
// not yet left (slow's) and keeps the one whose time came (fast's): given
// back, that one would move fast's queue up a place although its request
// left in it, and the queue behind would leave a spacing early.
func TestGoneKeepsSlotThatLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fast := rule("fast", sluice.LeakyBucket, sluice.PerSecond(10).WithBurst(20), rules.Delay, 5*time.Second)
		slow := rule("slow", sluice.LeakyBucket, sluice.PerSecond(1).WithBurst(5), rules.Delay, 5*time.Second)
		reg := prometheus.NewRegistry()
		e, err := engine.New(engine.Options{Store: memstore.New(memstore.Options{}), Rules: &rules.Set{Rules: []*rules.Rule{fast, slow}}, Metrics: metrics.New(reg)})
		if err != nil {
			t.Fatal(err)
		}
		ms := []rules.Match{{Rule: fast, Key: "f"}, {Rule: slow, Key: "s"}}
		if res := e.Decide(context.Background(), ms, 1); !res.Allowed { // slots leaving now
			t.Fatal("first request: denied")
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan engine.Result)
		go func() { done <- e.Admit(ctx, ms, 1) }() // fast's slot at 100ms, slow's at 1s
		synctest.Wait()
		for i := range 9 { // fast's slots at 200ms … 1s
			if res := e.Decide(context.Background(), ms[:1], 1); !res.Allowed {
				t.Fatalf("fast request %d: denied", i)
			}
		}
		time.Sleep(500 * time.Millisecond)
		cancel()
		if res := <-done; res.Allowed {
			t.Fatal("request gone at 500ms: allowed")
		}
		// At 500ms fast's queue holds the slots up to 1s (the gone
		// request's, at 100ms, has left): a new one leaves at 1.1s.
		if res := e.Decide(context.Background(), ms[:1], 1); !res.Allowed || res.Decision.Delay != 600*time.Millisecond {
			t.Errorf("fast request at 500ms: allowed %v with delay %v, want delay 600ms (the slot that left kept)", res.Allowed, res.Decision.Delay)
		}
		wantCounts(t, "slots given back", metricstest.Gather(t, reg), map[string]float64{
			`sluice_delay_given_back_total{rule="fast"}`: 0,
			`sluice_delay_given_back_total{rule="slow"}`: 1,
		})
	})
}
