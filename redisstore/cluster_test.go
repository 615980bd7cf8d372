package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestClusterTakeAllRefund races TakeAll(a, b) across two Cluster slots
// against Take(a) and Take(b) alone, at one instant (nothing refills). A
// TakeAll that passed its check may then be denied by one slot and must
// refund the other; in the end each key must have counted exactly what was
// admitted on it, and never more than its limit.
func TestClusterTakeAllRefund(t *testing.T) {
	t.Parallel() // a Cluster of its own: its start overlaps another test
	c := redistest.StartCluster(t)
	s := open(t, redisstore.Options{Addrs: c.Addrs, Cluster: true, Timeout: 5 * time.Second})
	ctx := context.Background()
	const limit = 40
	base := fmt.Sprintf("refund/%d", time.Now().UnixNano())
	a, b := base+"/a", base+"/b"
	for i := 0; ; i++ { // make sure a and b sit in different slots
		b = fmt.Sprintf("%s/b%d", base, i)
		sa, _ := redistest.Do(c.Addrs[0], "CLUSTER", "KEYSLOT", s.Key(a))
		sb, _ := redistest.Do(c.Addrs[0], "CLUSTER", "KEYSLOT", s.Key(b))
		if sa != sb {
			break
		}
	}
	for _, alg := range sluice.Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			l := sluice.PerHour(limit)
			if alg == sluice.LeakyBucket { // capacity Burst+1 at an instant
				l = l.WithBurst(limit - 1)
			}
			ka, kb := a+alg.String(), b+alg.String()
			r := func(k string) sluice.Request {
				return sluice.Request{Key: k, Algorithm: alg, Limit: l, Cost: 1, Now: sluicetest.T0}
			}
			var both, onlyA, onlyB atomic.Int64
			var wg sync.WaitGroup
			for w := range 12 {
				wg.Go(func() {
					for range 20 {
						switch w % 3 {
						case 0:
							ds := make([]sluice.Decision, 2)
							if err := s.TakeAll(ctx, []sluice.Request{r(ka), r(kb)}, ds); err != nil {
								t.Error(err)
								return
							}
							if sluice.AllAllowed(ds) {
								both.Add(1)
							}
						case 1:
							if d, err := s.Take(ctx, r(ka)); err != nil {
								t.Error(err)
								return
							} else if d.Allowed {
								onlyA.Add(1)
							}
						case 2:
							if d, err := s.Take(ctx, r(kb)); err != nil {
								t.Error(err)
								return
							} else if d.Allowed {
								onlyB.Add(1)
							}
						}
					}
				})
			}
			wg.Wait()
			t.Logf("refunds so far: %d", s.Refunds())
			q := func(k string) int64 {
				rq := r(k)
				rq.Cost = 0
				d, err := s.Take(ctx, rq)
				if err != nil {
					t.Fatal(err)
				}
				return d.Remaining
			}
			usedA, usedB := limit-q(ka), limit-q(kb)
			t.Logf("TakeAll admitted %d, Take(a) %d, Take(b) %d; a used %d, b used %d", both.Load(), onlyA.Load(), onlyB.Load(), usedA, usedB)
			if want := both.Load() + onlyA.Load(); usedA != want {
				t.Errorf("key a: %d used, want %d (TakeAll %d + Take %d)", usedA, want, both.Load(), onlyA.Load())
			}
			if want := both.Load() + onlyB.Load(); usedB != want {
				t.Errorf("key b: %d used, want %d (TakeAll %d + Take %d)", usedB, want, both.Load(), onlyB.Load())
			}
		})
	}
}
