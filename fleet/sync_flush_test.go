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

// flushing sends a Sync's batch after every decision: the interleaving the
// batch loop produces at its worst, made deterministic.
type flushing struct {
	t *testing.T
	s *fleet.Sync
}

func (f flushing) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	d, err := f.s.Take(ctx, r)
	if ferr := f.s.Flush(); ferr != nil {
		f.t.Errorf("Flush: %v", ferr)
	}
	return d, err
}

func (f flushing) TakeAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	err := f.s.TakeAll(ctx, rs, ds)
	if ferr := f.s.Flush(); ferr != nil {
		f.t.Errorf("Flush: %v", ferr)
	}
	return err
}

func TestSyncConformanceFlushEveryStep(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newSync(t, openShared(t, []string{srv.Addr}, false), fleet.SyncOptions{Interval: time.Hour})
	sluicetest.Run(t, func(t *testing.T) sluice.Store { return flushing{t, s} })
}
