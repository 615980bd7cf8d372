package fleet_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/sluicetest"
)

func newLease(t testing.TB, inner fleet.LeaseStore, o fleet.LeaseOptions) *fleet.Lease {
	t.Helper()
	l, err := fleet.NewLease(inner, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return l
}

// On the windows a single instance decides exactly as the shared store
// (what it holds is given back in its own view), so the whole suite runs
// with leases on the fixed window and the counter. A bucket's lease spends
// tokens the store counted at the grant, and refilled from then: its
// admissions stay within the limit (the bound tests), but its Remaining and
// ResetAfter are the store's at the grant, not exact, so for the buckets
// only the step tables run.
func TestLeaseConformance(t *testing.T) {
	srv := redistest.StartServer(t)
	rs := openShared(t, []string{srv.Addr}, false)
	windows := newLease(t, rs, fleet.LeaseOptions{Applies: func(r sluice.Request) bool {
		return r.Algorithm == sluice.FixedWindow || r.Algorithm == sluice.SlidingWindowCounter
	}})
	sluicetest.Run(t, func(*testing.T) sluice.Store { return windows })
	all := newLease(t, rs, fleet.LeaseOptions{})
	for _, tb := range sluicetest.Tables() {
		t.Run("Tables/"+tb.Name, func(t *testing.T) { sluicetest.RunTable(t, all, tb) })
	}
	if st := all.Stats(); st.Local == 0 || st.Calls == 0 || st.Calls >= st.Local {
		t.Errorf("Stats = %+v: want local decisions, and fewer calls", st)
	}
}

// leaseHammer runs n Lease instances, each with its own Redis client and
// four goroutines, at one instant (no refill, one window) under 10x
// overload. The fleet must never admit more than the limit, admit at least
// 90% of it, ask Redis at most 0.3 times per decision, and Close must give
// back every unit held: the store then counts exactly what was admitted.
func leaseHammer(t *testing.T, addrs []string, cluster bool, alg sluice.Algorithm, chunk int64) {
	const n, workers, limit = 3, 4, 300
	ctx := context.Background()
	key := fmt.Sprintf("hammer/%d/%s/%d", time.Now().UnixNano(), alg, chunk)
	r := sluice.Request{Key: key, Algorithm: alg, Limit: sluice.PerHour(limit), Cost: 1, Now: sluicetest.T0}
	var ls []*fleet.Lease
	for range n {
		l, err := fleet.NewLease(openShared(t, addrs, cluster), fleet.LeaseOptions{Chunk: chunk})
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	var admitted, decisions atomic.Int64
	var wg sync.WaitGroup
	for _, l := range ls {
		for range workers {
			wg.Go(func() {
				for range 10 * limit / (n * workers) {
					d, err := l.Take(ctx, r)
					if err != nil {
						t.Error(err)
						return
					}
					decisions.Add(1)
					if d.Allowed {
						admitted.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	var calls, held uint64
	for _, l := range ls {
		st := l.Stats()
		calls += st.Calls
		held += st.Granted - st.Returned - st.Spent
	}
	for _, l := range ls {
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	a := admitted.Load()
	perDecision := float64(calls) / float64(decisions.Load())
	t.Logf("%s chunk %d: admitted %d of %d (%d decisions), %d units held at the end, %.3f Redis calls per decision", alg, chunk, a, limit, decisions.Load(), held, perDecision)
	if a > limit {
		t.Errorf("admitted %d, over the limit %d", a, limit)
	}
	if a < limit*9/10 {
		t.Errorf("admitted %d, under 90%% of the limit %d", a, limit)
	}
	if perDecision > 0.3 {
		t.Errorf("%.3f Redis calls per decision, want at most 0.3", perDecision)
	}
	// After Close, a fresh exact read sees exactly what was admitted.
	q := r
	q.Cost = 0
	d, err := openShared(t, addrs, cluster).Take(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if d.Remaining != limit-a {
		t.Errorf("store's Remaining after Close = %d, want %d (limit - admitted: every unit held given back)", d.Remaining, limit-a)
	}
}

func TestLeaseHardBound(t *testing.T) {
	srv := redistest.StartServer(t)
	for _, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingWindowCounter, sluice.TokenBucket, sluice.GCRA} {
		for _, chunk := range []int64{0, 10} {
			t.Run(fmt.Sprintf("%s/chunk%d", alg, chunk), func(t *testing.T) { leaseHammer(t, []string{srv.Addr}, false, alg, chunk) })
		}
	}
}

func TestLeaseHardBoundCluster(t *testing.T) {
	t.Parallel() // a Cluster (or Redis) and stores of its own
	c := redistest.StartCluster(t)
	for _, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.GCRA} {
		t.Run(alg.String(), func(t *testing.T) { leaseHammer(t, c.Addrs, true, alg, 0) })
	}
}

// TestLeaseClose checks that Close gives back the units an instance holds,
// and that a lease of a window expires with it.
func TestLeaseClose(t *testing.T) {
	srv := redistest.StartServer(t)
	rs := openShared(t, []string{srv.Addr}, false)
	ctx := context.Background()
	for _, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingWindowCounter, sluice.GCRA, sluice.TokenBucket} {
		l, err := fleet.NewLease(rs, fleet.LeaseOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r := sluice.Request{Key: fmt.Sprintf("close/%d/%s", time.Now().UnixNano(), alg), Algorithm: alg, Limit: sluice.PerHour(320), Cost: 1, Now: time.Now()}
		q := r
		q.Cost = 0
		for _, r := range []sluice.Request{q, r} { // cold (counting nothing), then a lease
			if _, err := l.Take(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		if d, err := rs.Take(ctx, q); err != nil || d.Remaining != 300 {
			t.Errorf("%s: store's Remaining with a lease held = %d, %v; want 300 (an auto lease of 320/16 = 20)", alg, d.Remaining, err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if st := l.Stats(); st.Returned != 19 || st.Granted != 20 || st.Spent != 1 {
			t.Errorf("%s: Stats after Close = %+v, want 20 granted, 1 spent, 19 returned", alg, st)
		}
		if d, err := rs.Take(ctx, q); err != nil || d.Remaining != 319 {
			t.Errorf("%s: store's Remaining after Close = %d, %v; want 319", alg, d.Remaining, err)
		}
	}
}

// TestLeaseSweep: keys that hold nothing are forgotten once the keys have
// doubled, so memory follows the keys in use; a key holding units is kept.
func TestLeaseSweep(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	base := fmt.Sprintf("sweep/%d/", time.Now().UnixNano())
	// The requests carry fixed instants, not the clock: on a slow machine
	// the loop below may take seconds, and the keys it asked for last
	// would then not be idle a period at the end.
	t0 := time.Now()
	held := sluice.Request{Key: base + "held", Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(100), Cost: 1, Now: t0}
	l2 := newLease(t, openShared(t, []string{srv.Addr}, false), fleet.LeaseOptions{Chunk: 5})
	warm := held
	warm.Cost = 0
	for _, r := range []sluice.Request{warm, held} { // cold (counting nothing), then 4 units held
		if _, err := l2.Take(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	later := t0.Add(2 * time.Second) // past each key's period of 1s
	for i := range 5000 {
		r := sluice.Request{Key: base + strconv.Itoa(i), Algorithm: sluice.GCRA, Limit: sluice.PerSecond(10), Cost: 1, Now: t0}
		if i >= 4000 {
			r.Now = later
		}
		for range 2 { // cold, then held
			if _, err := l2.Take(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := l2.Stats().Keys; n > 1001 { // the held key and the 1000 used later
		t.Errorf("keys held after 5000 keys, 4000 of them idle a period: %d, want the sweep to have forgotten the idle ones", n)
	}
	if err := l2.Close(); err != nil {
		t.Fatal(err)
	}
	if st := l2.Stats(); st.Returned < 4 {
		t.Errorf("Stats after Close = %+v: want the 4 units of the held key given back (it was not swept)", st)
	}
}
