package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestLocalLimitStaysValid: an instance's share of a valid limit is a
// valid limit. Dividing the rate by more than the burst (a rate rounded
// down to 1) stretched a bucket's refill past the 142 years every time
// must stay within, so a Fallback in local mode refused every request of
// such a rule with ErrInvalidLimit, a programming error, during the
// outage it exists for. The share is never larger than the limit.
func TestLocalLimitStaysValid(t *testing.T) {
	const year = 365 * 24 * time.Hour
	for _, l := range []sluice.Limit{
		sluice.Every(5, 30*24*time.Hour).WithBurst(4000),
		sluice.Every(7, 24*time.Hour).WithBurst(7 * 5000),
		sluice.Every(10, 60*year),
		sluice.Every(3, 20*year).WithBurst(4),
	} {
		for _, alg := range sluice.Algorithms() {
			if alg.ValidateLimit(l) != nil || !alg.TakesBurst() {
				continue // a window's share: TestFallbackLocalValidLimit
			}
			for n := 1; n <= 12; n++ {
				got := fleet.LocalLimit(l, n)
				if err := alg.ValidateLimit(got); err != nil {
					t.Errorf("%s: LocalLimit(%v burst %d, %d) = %v burst %d: %v", alg, l, l.Burst, n, got, got.Burst, err)
				}
				if got.Period != l.Period || got.Rate > l.Rate || got.BurstOrRate() > l.BurstOrRate() || got.Segments != l.Segments {
					t.Errorf("%s: LocalLimit(%v burst %d, %d) = %v burst %d: more than the limit", alg, l, l.Burst, n, got, got.Burst)
				}
			}
		}
	}
}

// TestFallbackLocalValidLimit: in local mode with several instances, a
// rule whose share would not be valid as divided is still decided. A
// window's share keeps its burst its rate, as a window refuses any other:
// LocalLimit gives 10/60y over 4 a share of 3/60y with a burst of 2 (the
// least rate that refills the divided burst in time), which a window
// refused with ErrInvalidLimit during the outage.
func TestFallbackLocalValidLimit(t *testing.T) {
	const year = 365 * 24 * time.Hour
	down := errors.New("down")
	for n := 2; n <= 12; n++ {
		f := fleet.NewFallback(memstore.New(memstore.Options{}), fleet.FallbackOptions{ExpectedInstances: n, StartLocal: true,
			Probe: func(context.Context) error { return fmt.Errorf("%w: %w", sluice.ErrStoreUnavailable, down) }})
		t.Cleanup(f.Close)
		for ci, c := range []struct {
			algs []sluice.Algorithm
			l    sluice.Limit
		}{
			{[]sluice.Algorithm{sluice.TokenBucket, sluice.GCRA}, sluice.Every(5, 30*24*time.Hour).WithBurst(4000)},
			{sluice.Algorithms(), sluice.Every(10, 60*year)},
			{sluice.Algorithms(), sluice.Every(10, 60*year).WithBurst(10)},
		} {
			for _, alg := range c.algs {
				r := sluice.Request{Key: fmt.Sprintf("k/%d/%v", ci, alg), Algorithm: alg, Limit: c.l, Cost: 1, Now: sluicetest.T0}
				d, err := f.Take(context.Background(), r)
				if err != nil || !d.Allowed || d.Limit > c.l.Rate {
					t.Errorf("%s %v burst %d over %d: Take in local mode = %+v, %v; want allowed, within the limit", alg, c.l, c.l.Burst, n, d, err)
				}
				r.Key += "/all"
				ds := make([]sluice.Decision, 1)
				if err := f.TakeAll(context.Background(), []sluice.Request{r}, ds); err != nil || !ds[0].Allowed {
					t.Errorf("%s %v burst %d over %d: TakeAll in local mode = %+v, %v; want allowed", alg, c.l, c.l.Burst, n, ds[0], err)
				}
			}
		}
	}
}
