package sluice_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// TestWindowBurstRefused: a window admits its rate each period whatever
// the burst, so a burst other than the rate there is refused, naming the
// algorithm and the ones that take a burst, by every entry point:
// ValidateLimit, NewLimiter, SetLimit, AllowLimit, and the store-level Take. NewLimiter(store, FixedWindow,
// PerMinute(5).WithBurst(10)) used to succeed and admit 5 a minute. No
// burst (0) or a burst equal to the rate stays accepted, and the buckets
// and GCRA take any burst.
func TestWindowBurstRefused(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	for _, a := range sluice.Algorithms() {
		window := a == sluice.FixedWindow || a == sluice.SlidingWindowLog || a == sluice.SlidingWindowCounter
		for _, b := range []int64{10, 4, 1} {
			l := sluice.PerMinute(5).WithBurst(b)
			check := func(what string, err error) {
				t.Helper()
				if !window {
					if err != nil {
						t.Errorf("%s: %v burst %d: %v, want nil (%v takes a burst)", what, a, b, err, a)
					}
					return
				}
				if !errors.Is(err, sluice.ErrInvalidLimit) || !strings.Contains(err.Error(), a.String()) ||
					!strings.Contains(err.Error(), "token_bucket, gcra and leaky_bucket") {
					t.Errorf("%s: %v burst %d: %v, want ErrInvalidLimit naming %v and token_bucket, gcra and leaky_bucket", what, a, b, err, a)
				}
			}
			check("ValidateLimit", a.ValidateLimit(l))
			_, err := sluice.NewLimiter(memstore.New(memstore.Options{}), a, l)
			check("NewLimiter", err)
			var st sluice.State
			_, _, err = a.Take(&st, l, now, 1)
			check("Algorithm.Take", err)
			_, _, err = a.Charge(&st, l, now, 1)
			check("Algorithm.Charge", err)

			lim, err := sluice.NewLimiter(memstore.New(memstore.Options{}), a, sluice.PerMinute(5))
			if err != nil {
				t.Fatalf("NewLimiter(%v, 5/m) = %v", a, err)
			}
			check("SetLimit", lim.SetLimit(l))
			_, err = lim.AllowLimit(ctx, "k", l, 1)
			check("AllowLimit", err)
			if window {
				// Refused, not half-applied: the limit in force is still 5/m.
				d, err := lim.Allow(ctx, "k")
				if err != nil || !d.Allowed || d.Limit != 5 || d.Remaining != 4 {
					t.Errorf("%v: after a refused SetLimit, Allow = %+v, %v; want the old 5/m", a, d, err)
				}
			}
		}
		for _, l := range []sluice.Limit{sluice.PerMinute(5), sluice.PerMinute(5).WithBurst(5)} {
			if err := a.ValidateLimit(l); err != nil {
				t.Errorf("%v.ValidateLimit(5/m burst %d) = %v, want nil", a, l.Burst, err)
			}
			if _, err := sluice.NewLimiter(memstore.New(memstore.Options{}), a, l); err != nil {
				t.Errorf("NewLimiter(%v, 5/m burst %d) = %v, want nil", a, l.Burst, err)
			}
		}
	}
}

// isWindow reports whether a is a window, which takes no burst.
func isWindow(a sluice.Algorithm) bool {
	return a == sluice.FixedWindow || a == sluice.SlidingWindowLog || a == sluice.SlidingWindowCounter
}

// refusesBurst reports whether a refuses l for its burst: the tests that
// run a list of limits through every algorithm skip those pairs.
func refusesBurst(a sluice.Algorithm, l sluice.Limit) bool {
	return isWindow(a) && l.Burst != 0 && l.Burst != l.Rate
}
