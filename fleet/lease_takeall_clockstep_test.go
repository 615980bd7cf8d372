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

// TestLeaseTakeAllClockStepsBack: a Lease's TakeAll decides several keys
// as one, each on units reserved from its own key's master on a Cluster
// (here three keys, one on each). Over Redis' clock (RedisTime, as the
// daemon runs it), the instance's clock stepping back mid-way (an NTP
// step, a VM resumed) must neither make the fleet pass any key's limit
// nor leave the lease stuck:
//   - A's TakeAll reserves a chunk of each key and spends one; Redis'
//     window ends (its buckets are full again); then A, its clock now 2 s
//     behind, decides the three keys together while B, on time, decides
//     each alone: for each key, at most the limit between them.
//   - A spends all of each key and is refused; its clock steps back;
//     once Redis' window has ended, A's next TakeAll, its clock still
//     2 s behind, is admitted, as Redis would admit it, not refused for
//     the 2 s the step put between A's clock and the refusal's end.
//
// Over one Redis and a 3-node Cluster.
func TestLeaseTakeAllClockStepsBack(t *testing.T) {
	onServerAndCluster(t, testLeaseTakeAllClockStepsBack)
}

func testLeaseTakeAllClockStepsBack(t *testing.T, o redisstore.Options) {
	o.RedisTime = true
	const period, rate, step = time.Second, 5, -2 * time.Second
	for _, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingWindowCounter, sluice.TokenBucket, sluice.GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel() // each waits 2 s of Redis' clock twice, on leases and keys of its own
			limit := sluice.Every(rate, period)
			t.Run("limit", func(t *testing.T) {
				for attempt := 1; ; attempt++ {
					x := newStepFleet(t, o, alg, limit, rate)
					redistest.ClearOfWindowEdge(t, period, period/4)
					start := time.Now()
					// A reserves a chunk of each key, on each key's
					// master, and spends one of each: it holds 4.
					if !x.takeAll(0) {
						t.Fatal("A's TakeAll refused on fresh keys")
					}
					// Redis' window ends (its bucket is full again; the
					// counter's previous window weighs nothing a period on).
					waitUntil(start.Add(2 * period))
					p0 := time.Now()
					admitted := make([]int, len(x.keys))
					for range 2 * rate {
						if x.takeAll(step) { // A's clock has stepped back
							for i := range admitted {
								admitted[i]++
							}
						}
						for i, k := range x.keys {
							if x.take(k) {
								admitted[i]++
							}
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
					for i, k := range x.keys {
						if admitted[i] > most {
							t.Errorf("key %q: A (its clock 2 s back, deciding all three keys at once) and B admitted %d in %v after Redis' window ended, want at most %d", k, admitted[i], p1.Sub(p0), most)
						}
						if admitted[i] < rate-1 {
							t.Errorf("key %q: A and B admitted %d, want about %d: the test sees nothing", k, admitted[i], rate)
						}
					}
					return
				}
			})
			t.Run("stuck", func(t *testing.T) {
				x := newStepFleet(t, o, alg, limit, rate)
				redistest.ClearOfWindowEdge(t, period, period/4)
				start := time.Now()
				// A spends each key's limit, and is refused: its refusal
				// lasts until Redis' window ends (its bucket refills).
				for i := range rate {
					if !x.takeAll(0) {
						t.Fatalf("A's TakeAll %d of the limit's %d refused", i+1, rate)
					}
				}
				if x.takeAll(0) {
					t.Fatalf("A's TakeAll past the limit of %d admitted", rate)
				}
				// A's clock steps back; Redis' window ends.
				waitUntil(start.Add(2 * period))
				if !x.takeAll(step) {
					t.Errorf("A, its clock stepped 2 s back after a refusal, refused by its lease %v after it (Redis' window has ended): %+v", time.Since(start), x.last)
				}
			})
		})
	}
}

// stepFleet is two instances of a fleet over one Redis or Cluster: A,
// deciding keys together (Lease.TakeAll), and B, each alone (Lease.Take).
type stepFleet struct {
	t     *testing.T
	a, b  *fleet.Lease
	keys  []string
	alg   sluice.Algorithm
	limit sluice.Limit
	last  []sluice.Decision // A's last TakeAll's
}

// newStepFleet opens A and B, each reserving chunk units at a time, and
// picks three fresh keys, on a Cluster one on each master.
func newStepFleet(t *testing.T, o redisstore.Options, alg sluice.Algorithm, limit sluice.Limit, chunk int64) *stepFleet {
	t.Helper()
	sa := fleet.OpenRedis(t, o)
	x := &stepFleet{t: t, alg: alg, limit: limit,
		a: newLease(t, sa, fleet.LeaseOptions{Chunk: chunk}), b: newLease(t, fleet.OpenRedis(t, o), fleet.LeaseOptions{Chunk: chunk})}
	x.keys = keysApart(t, o, sa, fmt.Sprintf("takeallstep/%v/%d/", alg, time.Now().UnixNano()), 3)
	return x
}

// takeAll decides x's keys at once on A, its clock off by step, and
// reports whether they were admitted.
func (x *stepFleet) takeAll(step time.Duration) bool {
	x.t.Helper()
	now := time.Now().Add(step)
	rs := make([]sluice.Request, len(x.keys))
	for i, k := range x.keys {
		rs[i] = sluice.Request{Key: k, Algorithm: x.alg, Limit: x.limit, Cost: 1, Now: now}
	}
	x.last = make([]sluice.Decision, len(rs))
	if err := x.a.TakeAll(context.Background(), rs, x.last); err != nil {
		x.t.Fatal(err)
	}
	return sluice.AllAllowed(x.last)
}

// take decides key alone on B, on time, and reports whether it was
// admitted.
func (x *stepFleet) take(key string) bool {
	x.t.Helper()
	d, err := x.b.Take(context.Background(), sluice.Request{Key: key, Algorithm: x.alg, Limit: x.limit, Cost: 1, Now: time.Now()})
	if err != nil {
		x.t.Fatal(err)
	}
	return d.Allowed
}

// waitUntil returns once this machine's clock, which is Redis' (the
// servers run here), has passed end: a wait for Redis' window to end.
func waitUntil(end time.Time) {
	for time.Now().Before(end) {
		time.Sleep(time.Until(end))
	}
}
