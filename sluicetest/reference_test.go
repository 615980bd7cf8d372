package sluicetest_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestReference: the reference store passes its own suite, and the table
// of ExampleRunTable holds.
func TestReference(t *testing.T) {
	sluicetest.Run(t, func(t *testing.T) sluice.Store { return sluicetest.NewReference() })
	sluicetest.RunTable(t, sluicetest.NewReference(), sluicetest.Table{
		Name: "two a second", Algorithm: sluice.FixedWindow, Limit: sluice.PerSecond(2),
		Steps: []sluicetest.Step{
			{At: 0, Want: sluicetest.Want{Allowed: true, Remaining: 1, RetryAfter: 0, ResetAfter: time.Second, Delay: 0}},
			{At: 0, Want: sluicetest.Want{Allowed: true, Remaining: 0, RetryAfter: 0, ResetAfter: sluicetest.NotChecked, Delay: 0}},
			{At: 0, Want: sluicetest.Want{Allowed: false, Remaining: 0, RetryAfter: time.Second, ResetAfter: sluicetest.NotChecked, Delay: sluicetest.NotChecked}},
		},
	})
}

func TestClock(t *testing.T) {
	c := sluicetest.NewClock(sluicetest.T0)
	if got := c.Advance(time.Second); !got.Equal(sluicetest.T0.Add(time.Second)) || !c.Now().Equal(got) {
		t.Fatalf("Advance(1s) = %v, Now %v", got, c.Now())
	}
	c.Set(sluicetest.T0)
	if !c.Now().Equal(sluicetest.T0) {
		t.Fatalf("Set(T0): Now %v", c.Now())
	}
}
