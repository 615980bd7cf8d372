package fleet_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestOverLimitInvalidTime: a request whose Now the store refuses (before
// 1970: a clock stepped far back) is the store's ErrInvalidTime, never a
// refusal answered from the cache, even for a key the cache holds.
func TestOverLimitInvalidTime(t *testing.T) {
	c := fleet.NewOverLimitCache(memstore.New(memstore.Options{}), fleet.OverLimitOptions{})
	ctx := context.Background()
	r := sluice.Request{Key: "k", Algorithm: sluice.FixedWindow, Limit: sluice.PerMinute(1), Cost: 1, Now: sluicetest.T0}
	for i, want := range []bool{true, false} {
		if d, err := c.Take(ctx, r); err != nil || d.Allowed != want {
			t.Fatalf("Take #%d = %+v, %v; want allowed %v", i, d, err, want)
		}
	}
	for _, now := range []time.Time{time.Unix(-1, 0), sluice.MinTime.Add(-time.Hour)} {
		r.Now = now
		if d, err := c.Take(ctx, r); !errors.Is(err, sluice.ErrInvalidTime) {
			t.Errorf("Take at %v = %+v, %v; want ErrInvalidTime", now, d, err)
		}
		ds := make([]sluice.Decision, 1)
		if err := c.TakeAll(ctx, []sluice.Request{r}, ds); !errors.Is(err, sluice.ErrInvalidTime) {
			t.Errorf("TakeAll at %v = %+v, %v; want ErrInvalidTime", now, ds, err)
		}
	}
	if c.Hits() != 0 {
		t.Errorf("Hits = %d, want 0", c.Hits())
	}
}
