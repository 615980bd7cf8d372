package fleet_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/sluicetest"
)

// flushing sends a Sync's batch after every `every` decisions, itself:
// the interleavings the batch loop produces, made deterministic. Every 1
// is the loop at its busiest; every 499 (odd: between the two stores of a paired step too) piles up more hits per key than a
// Sync keeps apart between batches (a loaded machine's slow loop), so that
// they must be merged.
type flushing struct {
	t     *testing.T
	s     *fleet.Sync
	every int
	n     *int
}

func (f flushing) flush() {
	if *f.n++; *f.n%f.every != 0 {
		return
	}
	if err := f.s.Flush(); err != nil {
		f.t.Errorf("Flush: %v", err)
	}
}

func (f flushing) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	d, err := f.s.Take(ctx, r)
	f.flush()
	return d, err
}

func (f flushing) TakeAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	err := f.s.TakeAll(ctx, rs, ds)
	f.flush()
	return err
}

func TestSyncConformanceFlushEveryStep(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newSync(t, openShared(t, []string{srv.Addr}, false), fleet.SyncOptions{Interval: time.Hour})
	sluicetest.Run(t, func(t *testing.T) sluice.Store { return flushing{t, s, 1, new(int)} })
}

// TestSyncConformanceFlushRarely: hundreds of hits per key between
// batches, at clock steps of up to hours, still decide exactly as the
// shared store.
func TestSyncConformanceFlushRarely(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newSync(t, openShared(t, []string{srv.Addr}, false), fleet.SyncOptions{Interval: time.Hour})
	sluicetest.Run(t, func(t *testing.T) sluice.Store { return flushing{t, s, 499, new(int)} })
}
