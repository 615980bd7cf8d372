package sluicetest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// Testing code that uses a Limiter: give it a Clock and move the clock
// instead of sleeping.
func ExampleClock() {
	clk := sluicetest.NewClock(sluicetest.T0)
	lim, _ := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.TokenBucket, sluice.PerSecond(2).WithBurst(1),
		sluice.WithClock(clk.Now))
	ctx := context.Background()

	d, _ := lim.Allow(ctx, "k")
	fmt.Println(d.Allowed)
	d, _ = lim.Allow(ctx, "k")
	fmt.Println(d.Allowed, d.RetryAfter)
	clk.Advance(d.RetryAfter)
	d, _ = lim.Allow(ctx, "k")
	fmt.Println(d.Allowed)
	// Output:
	// true
	// false 500ms
	// true
}

// A store's own test runs the conformance suite:
//
//	func TestConformance(t *testing.T) {
//		sluicetest.Run(t, func(t *testing.T) sluice.Store { return mystore.New() })
//	}
//
// and can add step tables of its own with RunTable (the table below runs
// in this package's tests against Reference).
func ExampleRunTable() {
	table := sluicetest.Table{
		Name: "two a second", Algorithm: sluice.FixedWindow, Limit: sluice.PerSecond(2),
		Steps: []sluicetest.Step{
			{At: 0, Want: sluicetest.Want{Allowed: true, Remaining: 1, RetryAfter: 0, ResetAfter: time.Second, Delay: 0}},
			{At: 0, Want: sluicetest.Want{Allowed: true, Remaining: 0, RetryAfter: 0, ResetAfter: sluicetest.NotChecked, Delay: 0}},
			{At: 0, Want: sluicetest.Want{Allowed: false, Remaining: 0, RetryAfter: time.Second, ResetAfter: sluicetest.NotChecked, Delay: sluicetest.NotChecked}},
		},
	}
	// In a test function:
	//	sluicetest.RunTable(t, store, table)
	_ = table
}
