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

// TestLeaseDrop: after Drop the units held are neither spent nor given
// back (the store that counted them lost its data), and a key refused for
// want of units is asked of the store again.
func TestLeaseDrop(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	store := openShared(t, []string{srv.Addr}, false)
	l, err := fleet.NewLease(openShared(t, []string{srv.Addr}, false), fleet.LeaseOptions{Chunk: 3})
	if err != nil {
		t.Fatal(err)
	}
	t0 := sluicetest.T0.Add(10 * time.Minute)
	held := sluice.Request{Key: "drop/held", Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(4), Cost: 1, Now: t0}
	full := held
	full.Key = "drop/full"
	// held: decided in the store, then a reservation of 3 with one spent.
	// full: the same, then the last unit, then refused on the instance.
	for i, want := range []bool{true, true} {
		if d, err := l.Take(ctx, held); err != nil || d.Allowed != want {
			t.Fatalf("held #%d = %+v, %v; want allowed %v", i, d, err, want)
		}
	}
	for i, want := range []bool{true, true, true, true, false, false} {
		if d, err := l.Take(ctx, full); err != nil || d.Allowed != want {
			t.Fatalf("full #%d = %+v, %v; want allowed %v", i, d, err, want)
		}
	}
	calls := l.Stats().Calls
	if _, err := redistest.Do(srv.Addr, "FLUSHALL"); err != nil { // the store loses its data
		t.Fatal(err)
	}
	l.Drop()
	// full is a new key again: decided in the store, which admits it.
	if d, err := l.Take(ctx, full); err != nil || !d.Allowed {
		t.Fatalf("full after Drop = %+v, %v; want allowed by the emptied store", d, err)
	}
	// held's 2 units are gone: Close gives nothing back, and the store
	// counts only what was spent since.
	if d, err := l.Take(ctx, held); err != nil || !d.Allowed {
		t.Fatalf("held after Drop = %+v, %v; want allowed", d, err)
	}
	if got := l.Stats().Calls; got != calls {
		t.Fatalf("%d reservations after Drop, want none (both keys cold again)", got-calls)
	}
	if err := l.CloseAt(t0); err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.Returned != 0 {
		t.Errorf("%d units given back after Drop, want 0", st.Returned)
	}
	for _, r := range []sluice.Request{held, full} {
		r.Cost = 0
		if d, err := store.Take(ctx, r); err != nil || d.Remaining != 3 {
			t.Errorf("%s in the store after Drop and Close: %+v, %v; want remaining 3", r.Key, d, err)
		}
	}
}
