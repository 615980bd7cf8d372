package sluice_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// plainStore hides its store's KeyTaker: a Limiter on it goes through Take.
type plainStore struct{ sluice.Store }

// countingStore counts the calls a Limiter makes through each path.
type countingStore struct {
	*memstore.Store
	takes, keyTakes atomic.Int64
	last            atomic.Pointer[sluice.Request]
}

func (c *countingStore) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	c.takes.Add(1)
	return c.Store.Take(ctx, r)
}

func (c *countingStore) TakeKey(ctx context.Context, r *sluice.Request, key string, cost int64, now time.Time) (bool, int64, time.Duration, time.Duration, time.Duration, error) {
	c.keyTakes.Add(1)
	c.last.Store(r)
	return c.Store.TakeKey(ctx, r, key, cost, now)
}

// TestLimiterKeyTakerDecidesAsTake: a Limiter on memstore (which has the
// KeyTaker fast path) and one on the same kind of store through Take alone
// decide a random trace alike, for every algorithm, across a SetLimit, with
// the same errors.
func TestLimiterKeyTakerDecidesAsTake(t *testing.T) {
	ctx := context.Background()
	seed := sluicetest.Seed(t)
	limits := []sluice.Limit{sluice.Every(5, 100*time.Millisecond), sluice.Every(3, time.Second).WithBurst(6), sluice.Every(4, time.Second).WithSegments(4)}
	for _, alg := range sluice.Algorithms() {
		rng := rand.New(rand.NewPCG(seed, uint64(alg)))
		fast, err := sluice.NewLimiter(memstore.New(memstore.Options{}), alg, limits[0], sluice.WithName("api"))
		if err != nil {
			t.Fatal(err)
		}
		slow, err := sluice.NewLimiter(plainStore{memstore.New(memstore.Options{})}, alg, limits[0], sluice.WithName("api"))
		if err != nil {
			t.Fatal(err)
		}
		now := sluicetest.T0
		for i := range 600 {
			if i%200 == 199 {
				l := limits[(i/200+1)%len(limits)]
				if l.Segments > 1 && alg != sluice.SlidingWindowCounter {
					l.Segments = 0
				}
				if refusesBurst(alg, l) {
					l.Burst = 0 // a window takes no burst
				}
				if err := fast.SetLimit(l); err != nil {
					t.Fatal(err)
				}
				if err := slow.SetLimit(l); err != nil {
					t.Fatal(err)
				}
			}
			now = now.Add(time.Duration(rng.IntN(40)) * time.Millisecond)
			key := string(rune('a' + rng.IntN(3)))
			cost := int64(rng.IntN(4)) - int64(rng.IntN(20)/19) // now and then -1
			df, ef := fast.AllowAt(ctx, key, now, cost)
			ds, es := slow.AllowAt(ctx, key, now, cost)
			if df != ds || (ef == nil) != (es == nil) || ef != nil && ef.Error() != es.Error() {
				t.Fatalf("%s step %d (seed %d): AllowAt(%q, cost %d) = %+v, %v through KeyTaker; %+v, %v through Take", alg, i, seed, key, cost, df, ef, ds, es)
			}
			if cost < 0 && !errors.Is(ef, sluice.ErrInvalidCost) {
				t.Fatalf("%s: cost %d: error %v, want ErrInvalidCost", alg, cost, ef)
			}
		}
	}
}

// TestLimiterUsesKeyTaker: Allow, AllowN and AllowAt go through the
// store's TakeKey with the Limiter's Request for its limit in force;
// per-call limits and reports, which that Request does not describe, go
// through Take.
func TestLimiterUsesKeyTaker(t *testing.T) {
	ctx := context.Background()
	s := &countingStore{Store: memstore.New(memstore.Options{})}
	lim, err := sluice.NewLimiter(s, sluice.GCRA, sluice.PerMinute(10), sluice.WithName("api"))
	if err != nil {
		t.Fatal(err)
	}
	for _, call := range []func() (sluice.Decision, error){
		func() (sluice.Decision, error) { return lim.Allow(ctx, "k") },
		func() (sluice.Decision, error) { return lim.AllowN(ctx, "k", 2) },
		func() (sluice.Decision, error) { return lim.AllowAt(ctx, "k", time.Now(), 1) },
	} {
		if d, err := call(); err != nil || !d.Allowed || d.Limit != 10 {
			t.Fatalf("decision %+v, %v; want allowed, limit 10", d, err)
		}
	}
	if got := s.keyTakes.Load(); got != 3 || s.takes.Load() != 0 {
		t.Fatalf("TakeKey %d times, Take %d times; want 3 and 0", got, s.takes.Load())
	}
	r := s.last.Load()
	if r.Namespace != lim.Namespace() || r.Algorithm != sluice.GCRA || r.Limit != lim.Limit() || r.Force {
		t.Errorf("TakeKey got %+v; want the namespace %q, GCRA and %v", r, lim.Namespace(), lim.Limit())
	}
	if _, err := lim.AllowLimit(ctx, "k", sluice.PerMinute(5), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := lim.Report(ctx, "k", 3); err != nil {
		t.Fatal(err)
	}
	if s.takes.Load() != 2 || s.keyTakes.Load() != 3 {
		t.Errorf("after AllowLimit and Report: Take %d times, TakeKey %d; want 2 and 3", s.takes.Load(), s.keyTakes.Load())
	}
}

// TestLimiterHotPathAllocatesNothing: a decision on memstore allocates
// nothing once the key exists, for every algorithm that keeps no log.
func TestLimiterHotPathAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	ctx := context.Background()
	for _, alg := range sluice.Algorithms() {
		if alg.UsesLog(sluice.PerSecond(1)) {
			continue
		}
		lim, err := sluice.NewLimiter(memstore.New(memstore.Options{}), alg, sluice.Every(2000, time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		i := 0
		allocs := testing.AllocsPerRun(1000, func() {
			i++
			if d, err := lim.AllowAt(ctx, "hot", sluicetest.T0.Add(time.Duration(i)*time.Microsecond), 1); err != nil || !d.Allowed {
				t.Fatalf("%s: %+v, %v", alg, d, err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per decision, want 0", alg, allocs)
		}
	}
}
