package fleet_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/memstore"
)

// noReset is a store that cannot reset keys (no sluice.Resetter).
type noReset struct{ sluice.Store }

// TestResetUnsupported: Limiter.Reset over a decorator whose store cannot
// reset keys fails with an error wrapping errors.ErrUnsupported, as it
// does on such a store itself (Limiter.Reset's contract); the decorators
// are Resetters whatever they wrap, so the error is theirs to wrap.
func TestResetUnsupported(t *testing.T) {
	inner := noReset{memstore.New(memstore.Options{})}
	fb := fleet.NewFallback(inner, fleet.FallbackOptions{})
	t.Cleanup(fb.Close)
	for name, s := range map[string]sluice.Store{
		"plain":          inner,
		"OverLimitCache": fleet.NewOverLimitCache(inner, fleet.OverLimitOptions{}),
		"Fallback":       fb,
	} {
		lim, err := sluice.NewLimiter(s, sluice.GCRA, sluice.PerSecond(1))
		if err != nil {
			t.Fatal(err)
		}
		if err := lim.Reset(context.Background(), "k"); !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("%s: Reset = %v, want an error wrapping errors.ErrUnsupported", name, err)
		}
	}
}
