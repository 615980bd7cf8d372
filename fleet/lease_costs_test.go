package fleet_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestLeaseHardBoundCosts: three instances, four workers each, asking
// for costs from 1 to 15 (past a chunk of 10, and past the auto chunk) on
// two keys, by Take and by TakeAll over both, at 10× the limit: the cost
// admitted on each key never passes its limit, and after Close a fresh
// exact read finds exactly what was admitted counted, no unit held.
func TestLeaseHardBoundCosts(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	const n, workers, limit = 3, 4, 300
	for _, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingWindowCounter, sluice.TokenBucket, sluice.GCRA} {
		for _, chunk := range []int64{0, 10} {
			t.Run(fmt.Sprintf("%s/chunk%d", alg, chunk), func(t *testing.T) {
				seed := sluicetest.Seed(t)
				base := fmt.Sprintf("costs/%d/%s/%d/", time.Now().UnixNano(), alg, chunk)
				rq := func(k int, cost int64) sluice.Request {
					return sluice.Request{Key: base + fmt.Sprint(k), Algorithm: alg, Limit: sluice.PerHour(limit), Cost: cost, Now: sluicetest.T0}
				}
				var ls []*fleet.Lease
				for range n {
					ls = append(ls, newLease(t, openShared(t, []string{srv.Addr}, false), fleet.LeaseOptions{Chunk: chunk}))
				}
				var admitted [2]atomic.Int64
				var wg sync.WaitGroup
				for i, l := range ls {
					for w := range workers {
						rng := rand.New(rand.NewPCG(seed, uint64(i*workers+w)))
						wg.Go(func() {
							for spent := 0; spent < 10*limit/(n*workers); {
								c0, c1 := 1+rng.Int64N(15), 1+rng.Int64N(15)
								if rng.IntN(4) == 0 {
									ds := make([]sluice.Decision, 2)
									if err := l.TakeAll(ctx, []sluice.Request{rq(0, c0), rq(1, c1)}, ds); err != nil {
										t.Error(err)
										return
									}
									if sluice.AllAllowed(ds) {
										admitted[0].Add(c0)
										admitted[1].Add(c1)
									}
									spent += int(c0 + c1)
									continue
								}
								k := rng.IntN(2)
								d, err := l.Take(ctx, rq(k, c0))
								if err != nil {
									t.Error(err)
									return
								}
								if d.Allowed {
									admitted[k].Add(c0)
								}
								spent += int(c0)
							}
						})
					}
				}
				wg.Wait()
				for _, l := range ls {
					if err := l.CloseAt(sluicetest.T0); err != nil { // on the requests' clock: their units are not expired
						t.Fatal(err)
					}
				}
				for k := range 2 {
					a := admitted[k].Load()
					d, err := openShared(t, []string{srv.Addr}, false).Take(ctx, rq(k, 0))
					if err != nil {
						t.Fatal(err)
					}
					t.Logf("key %d: admitted %d of %d; Redis has %d left", k, a, limit, d.Remaining)
					if a > limit {
						t.Errorf("key %d: admitted a cost of %d, over the limit %d", k, a, limit)
					}
					if a < limit*8/10 {
						t.Errorf("key %d: admitted a cost of %d, under 80%% of the limit %d", k, a, limit)
					}
					if d.Remaining != limit-a {
						t.Errorf("key %d: Redis has %d left after Close, want %d (the limit less what was admitted)", k, d.Remaining, limit-a)
					}
				}
			})
		}
	}
}
