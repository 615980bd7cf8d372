package fleet_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// TestLeaseClockStepsBack: over Redis' clock (RedisTime, as the daemon
// runs it), an instance whose clock steps back (an NTP step, a VM resumed)
// after a reservation must not spend its units past the window (or the
// bucket's refill) Redis counted them in: the fleet would pass the limit.
// Instance A reserves, Redis' window ends (its bucket refills), then A,
// its clock now 2 s behind, and B, on time, decide the key: together at
// most the limit (a bucket: its burst, and what refills meanwhile).
// Before, A's units expired on its own clock, which had gone back: A spent
// its 3 stale units on top of B's 5. Over one Redis and a 3-node Cluster.
func TestLeaseClockStepsBack(t *testing.T) {
	onServerAndCluster(t, testLeaseClockStepsBack)
}

func testLeaseClockStepsBack(t *testing.T, o redisstore.Options) {
	o.RedisTime = true
	ctx := context.Background()
	const period, rate = time.Second, 5
	for _, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingWindowCounter, sluice.TokenBucket, sluice.GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel() // each waits 2 s of Redis' clock, on leases and a key of its own
			limit := sluice.Every(rate, period)
			for attempt := 1; ; attempt++ {
				a := newLease(t, fleet.OpenRedis(t, o), fleet.LeaseOptions{Chunk: rate})
				b := newLease(t, fleet.OpenRedis(t, o), fleet.LeaseOptions{Chunk: rate})
				key := fmt.Sprintf("clockstep/%v/%d", alg, time.Now().UnixNano())
				take := func(l *fleet.Lease, step time.Duration) bool {
					t.Helper()
					d, err := l.Take(ctx, sluice.Request{Key: key, Algorithm: alg, Limit: limit, Cost: 1, Now: time.Now().Add(step)})
					if err != nil {
						t.Fatal(err)
					}
					return d.Allowed
				}
				redistest.ClearOfWindowEdge(t, period, period/4)
				start := time.Now()
				// A's first request is decided in Redis; its second
				// reserves the 4 left and spends one: A holds 3.
				for i := range 2 {
					if !take(a, 0) {
						t.Fatalf("A's request %d refused on a fresh key", i)
					}
				}
				// Redis' window ends (its bucket is full again; the
				// counter's previous window weighs nothing a period on).
				end := start.Add(2 * period)
				for time.Now().Before(end) {
					time.Sleep(time.Until(end))
				}
				p0 := time.Now()
				admitted := 0
				for range 2 * rate {
					if take(a, -2*time.Second) { // A's clock has stepped back
						admitted++
					}
					if take(b, 0) {
						admitted++
					}
				}
				p1 := time.Now()
				if p1.Truncate(period) != p0.Truncate(period) && attempt < 3 {
					t.Logf("attempt %d crossed a window's end (%v): again", attempt, p1.Sub(p0))
					continue
				}
				// A bucket refills rate per period meanwhile; a window
				// admits rate.
				most := rate + int(int64(rate)*int64(p1.Sub(p0))/int64(period))
				if alg == sluice.FixedWindow || alg == sluice.SlidingWindowCounter {
					most = rate
				}
				if admitted > most {
					t.Errorf("A (its clock 2 s back) and B admitted %d in %v after Redis' window ended, want at most %d", admitted, p1.Sub(p0), most)
				}
				if admitted < rate-1 {
					t.Errorf("A and B admitted %d, want about %d: the test sees nothing", admitted, rate)
				}
				return
			}
		})
	}
}
