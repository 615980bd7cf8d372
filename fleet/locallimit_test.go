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
			if alg.ValidateLimit(l) != nil {
				continue
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
// rule whose share would not be valid as divided is still decided.
func TestFallbackLocalValidLimit(t *testing.T) {
	down := errors.New("down")
	f := fleet.NewFallback(memstore.New(memstore.Options{}), fleet.FallbackOptions{ExpectedInstances: 4, StartLocal: true,
		Probe: func(context.Context) error { return fmt.Errorf("%w: %w", sluice.ErrStoreUnavailable, down) }})
	t.Cleanup(f.Close)
	l := sluice.Every(5, 30*24*time.Hour).WithBurst(4000)
	for _, alg := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA} {
		d, err := f.Take(context.Background(), sluice.Request{Key: "k", Algorithm: alg, Limit: l, Cost: 1, Now: sluicetest.T0})
		if err != nil || !d.Allowed {
			t.Errorf("%s: Take in local mode = %+v, %v; want allowed", alg, d, err)
		}
	}
}
