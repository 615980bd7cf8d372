package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestFleetCloseOnDecisionClock: at Close the fleet store gives a lease's
// units back as good or expired on the decisions' clock (Options.Now), not
// the wall clock: here the 8 units held, a minute into their window.
func TestFleetCloseOnDecisionClock(t *testing.T) {
	st, lazy := connectedRedis(t)
	t0 := sluicetest.T0.Add(10 * time.Minute)
	f := newFleetStore(lazy, nil, func() time.Time { return t0.Add(time.Minute) })
	set, err := rules.Compile("close.yaml", []rules.Spec{
		{Name: "hard", Rate: "10/h", Algorithm: "fixed_window", Lease: rules.AutoCount{N: 10}},
	})
	if err != nil {
		t.Fatal(err)
	}
	configureFleet(t, f, set)
	rule := set.Rule("hard")
	r := sluice.Request{Key: rule.StoreKey("k"), Algorithm: rule.Algorithm, Limit: rule.Limit, Cost: 1, Now: t0}
	// The first request is decided in Redis, the second reserves the
	// other 9 units and spends one.
	for i := range 2 {
		if d, err := f.Take(context.Background(), r); err != nil || !d.Allowed {
			t.Fatalf("Take #%d = %+v, %v; want allowed", i, d, err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	probe := r
	probe.Cost, probe.Now = 0, t0.Add(time.Minute)
	if d, err := st.Take(context.Background(), probe); err != nil || d.Remaining != 8 {
		t.Errorf("Redis after Close: %+v, %v; want 8 remaining (2 of 10 spent, the 8 held given back)", d, err)
	}
}
