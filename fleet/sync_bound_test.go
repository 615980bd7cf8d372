package fleet_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/sluicetest"
)

// syncRounds runs n Sync instances, each with its own Redis client, in
// rounds: every round each instance is asked m times for one key at one
// instant (no refill, one window), then all flush in turn. An instance's
// view then lacks at most the other instances' hits of one round (those
// flushing after it) plus those of the round under way, so the fleet admits
// at most limit + 2·(n−1)·m, the formula's (n−1)/n · λ · 2·Interval with
// λ·Interval = n·m. It must also reach the limit, and the store must have
// counted every admission, no more, no less.
func syncRounds(t *testing.T, addrs []string, cluster bool, alg sluice.Algorithm) {
	syncRoundsOf(t, addrs, cluster, alg, []int{7, 7, 7})
}

// syncRoundsOf is syncRounds with instance i asked ms[i] times a round.
// With M the sum of ms, the bound is limit + 2·(M − Σ ms[i]²/M): the
// formula's (n−1)/n · λ for even traffic, and less for uneven (an
// instance's view lacks the others' hits, and it admits past the limit
// only as fast as its own traffic).
func syncRoundsOf(t *testing.T, addrs []string, cluster bool, alg sluice.Algorithm, ms []int) {
	const limit = 200
	n := len(ms)
	sum, sq := 0, 0
	for _, m := range ms {
		sum, sq = sum+m, sq+m*m
	}
	ctx := context.Background()
	var ss []*fleet.Sync
	for range n {
		ss = append(ss, newSync(t, openShared(t, addrs, cluster), fleet.SyncOptions{Interval: time.Hour}))
	}
	key := fmt.Sprintf("rounds/%d/%s", time.Now().UnixNano(), alg)
	r := sluice.Request{Key: key, Algorithm: alg, Limit: sluice.PerHour(limit), Cost: 1, Now: sluicetest.T0}
	admitted := 0
	for range 3 * limit / sum { // 3x overload
		for i, s := range ss {
			for range ms[i] {
				d, err := s.Take(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					admitted++
				}
			}
		}
		for _, s := range ss {
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	bound := limit + (2*(sum*sum-sq)+sum-1)/sum // limit + ⌈2·(M − Σm²/M)⌉
	t.Logf("%s: %d instances, %v requests per round: admitted %d of limit %d (bound %d)", alg, n, ms, admitted, limit, bound)
	if admitted > bound || admitted < limit {
		t.Errorf("%s: admitted %d, want between the limit %d and the bound %d", alg, admitted, limit, bound)
	}
	// What the store counted: read it through a fresh instance (its first
	// request of the key is cold, decided in Redis; the second reads the
	// key's state).
	probe := newSync(t, openShared(t, addrs, cluster), fleet.SyncOptions{Interval: time.Hour})
	q := r
	q.Cost = 0
	var d sluice.Decision
	for range 2 {
		var err error
		if d, err = probe.Take(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if st := probe.Stats(); alg == sluice.FixedWindow && st.MaxOvershoot != int64(admitted-limit) {
		t.Errorf("store's overshoot as seen by a fresh instance = %d, want %d (every admission counted)", st.MaxOvershoot, admitted-limit)
	}
	if d.Remaining != 0 {
		t.Errorf("Remaining after the run = %d, want 0", d.Remaining)
	}
}

func TestSyncBound(t *testing.T) {
	srv := redistest.StartServer(t)
	for _, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingWindowCounter, sluice.TokenBucket, sluice.GCRA} {
		t.Run(alg.String(), func(t *testing.T) { syncRounds(t, []string{srv.Addr}, false, alg) })
	}
}

// TestSyncBoundUneven: traffic spread unevenly over the instances passes
// the limit by no more than the formula for even traffic, and by less.
func TestSyncBoundUneven(t *testing.T) {
	srv := redistest.StartServer(t)
	for _, ms := range [][]int{{17, 3, 1}, {1, 1, 19}, {10, 10, 1}, {20, 1}} {
		for _, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingWindowCounter, sluice.TokenBucket, sluice.GCRA} {
			t.Run(fmt.Sprintf("%v/%v", ms, alg), func(t *testing.T) { syncRoundsOf(t, []string{srv.Addr}, false, alg, ms) })
		}
	}
}

func TestSyncBoundCluster(t *testing.T) {
	t.Parallel() // a Cluster (or Redis) and stores of its own
	c := redistest.StartCluster(t)
	for _, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.GCRA} {
		t.Run(alg.String(), func(t *testing.T) { syncRounds(t, c.Addrs, true, alg) })
	}
}
