package memstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestTakeAllAnySize: TakeAll of 1 to 12 requests, some of one key, decides
// as the reference store does, on either side of the eight it keeps its
// working slices on the stack for.
func TestTakeAllAnySize(t *testing.T) {
	ctx := context.Background()
	s, ref := memstore.New(memstore.Options{}), sluicetest.NewReference()
	rng := rand.New(rand.NewPCG(1, 2))
	l := sluice.Every(5, time.Second)
	for step := range 400 {
		n := 1 + step%12
		qs := make([]sluice.Request, n)
		for i := range qs {
			qs[i] = sluice.Request{Key: fmt.Sprint("k", rng.IntN(6)), Algorithm: sluice.TokenBucket, Limit: l,
				Cost: int64(rng.IntN(2)), Now: sluicetest.T0.Add(time.Duration(step) * 100 * time.Millisecond)}
		}
		got, want := make([]sluice.Decision, n), make([]sluice.Decision, n)
		if err := s.TakeAll(ctx, qs, got); err != nil {
			t.Fatal(err)
		}
		if err := ref.TakeAll(ctx, qs, want); err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("step %d, %d requests: request %d (%s) decided %+v, the reference %+v", step, n, i, qs[i].Key, got[i], want[i])
			}
		}
	}
}

// TestTakeAllUpTo8AllocatesNothing: TakeAll of eight requests of warm keys
// allocates nothing (it made three slices for four requests, six for eight).
func TestTakeAllUpTo8AllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	ctx := context.Background()
	s := memstore.New(memstore.Options{})
	qs := make([]sluice.Request, 8)
	for i := range qs {
		qs[i] = sluice.Request{Key: fmt.Sprint("a", i), Algorithm: sluice.TokenBucket, Limit: sluice.Every(1000000000, time.Second), Cost: 1, Now: sluicetest.T0}
	}
	ds := make([]sluice.Decision, len(qs))
	if err := s.TakeAll(ctx, qs, ds); err != nil { // the keys' first take makes them
		t.Fatal(err)
	}
	if allocs := testing.AllocsPerRun(100, func() { s.TakeAll(ctx, qs, ds) }); allocs != 0 {
		t.Errorf("TakeAll of 8 requests: %v allocations, want 0", allocs)
	}
}
