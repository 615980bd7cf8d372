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

// TestSyncStatsDecisions: each decision counts once in SyncStats, where it
// was made. A key's first request is cold (decided in the store), its
// second is decided in the store too by the entry's first read (a load),
// the rest locally: Local counts only those, as the store's count shows.
func TestSyncStatsDecisions(t *testing.T) {
	srv := redistest.StartServer(t)
	store := openShared(t, []string{srv.Addr}, false)
	// An hour: no batch of the loop during the test.
	s := newSync(t, openShared(t, []string{srv.Addr}, false), fleet.SyncOptions{Interval: time.Hour})
	r := sluice.Request{Key: "k", Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(100), Cost: 1, Now: sluicetest.T0.Add(10 * time.Minute)}
	for i := range 5 {
		if d, err := s.Take(context.Background(), r); err != nil || !d.Allowed {
			t.Fatalf("Take #%d = %+v, %v; want allowed", i, d, err)
		}
	}
	inStore := countedIn(t, store, r)
	st := s.Stats()
	if inStore != 2 || st.Cold != 1 || st.Loads != 1 {
		t.Fatalf("the store counts %d, Stats %+v; want 2 decided there: one cold, one load", inStore, st)
	}
	if st.Local != 5-uint64(inStore) {
		t.Errorf("Stats.Local = %d after 5 decisions, %d of them made in the store; want %d", st.Local, inStore, 5-inStore)
	}
}
