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

// TestLeaseReturnReplyLost gives units back for a report (which the units
// held do not cover) and loses the reply after Redis took them back: the
// report fails, and the units must not be given back a second time by
// Close. Redis must then count at least what was admitted: given back
// twice, the count fell below it and the fleet could admit that much more
// than the limit.
func TestLeaseReturnReplyLost(t *testing.T) {
	srv, cut, rs, l, key := cutLease(t, "lostreturn")
	ctx := context.Background()
	now := time.Now()
	r := sluice.Request{Key: key, Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(1000), Cost: 1, Now: now}
	admitted := 0
	for i := range 3 { // cold, then a grant of 10, spent locally
		if d, err := l.Take(ctx, r); err != nil || !d.Allowed {
			t.Fatalf("Take %d = %+v, %v; want allowed", i, d, err)
		}
		admitted++
	}
	if st := l.Stats(); st.Granted == 0 || st.Local == 0 {
		t.Fatalf("Stats = %+v: want units granted and spent locally", st)
	}
	cut.Arm()
	rep := r
	rep.Force, rep.Cost = true, 2000 // past the limit: no grant can hold it, the units held go back first
	if _, err := l.Take(ctx, rep); err == nil {
		t.Fatalf("report whose give-back lost its reply succeeded")
	}
	if !cut.Cut() {
		t.Fatalf("no reply was lost: the test did not cut")
	}
	if err := l.CloseAt(now); err != nil {
		t.Logf("CloseAt: %v", err)
	}
	if got := count(t, srv.Addr, rs.Key(key)); got != fmt.Sprint(admitted) {
		t.Fatalf("Redis counts %s after the lost give-back and Close, want %d (admitted)", got, admitted)
	}
}

// TestLeaseExpiredBackReplyLost gives back a sliding window counter's
// expired units with a grant whose reply is lost after Redis ran it: the
// next grant must not give them back again. Given back twice, the
// previous window's count fell below what was admitted in it (3), and
// the counter's estimate let the fleet admit more than the limit.
func TestLeaseExpiredBackReplyLost(t *testing.T) {
	srv, cut, rs, l, key := cutLease(t, "lostback")
	ctx := context.Background()
	t0 := time.Now().Truncate(time.Hour)
	r := sluice.Request{Key: key, Algorithm: sluice.SlidingWindowCounter, Limit: sluice.PerHour(1000), Cost: 1, Now: t0}
	for i := range 3 { // cold, then a grant of 10, spent locally: 8 left, they expire with the window
		if d, err := l.Take(ctx, r); err != nil || !d.Allowed {
			t.Fatalf("Take %d = %+v, %v; want allowed", i, d, err)
		}
	}
	r.Now = t0.Add(time.Hour) // the next window: the 8 go back with the next grant
	cut.Arm()
	if _, err := l.Take(ctx, r); err == nil {
		t.Fatalf("Take whose grant lost its reply succeeded")
	}
	if !cut.Cut() {
		t.Fatalf("no reply was lost: the test did not cut")
	}
	deadline := time.Now().Add(10 * time.Second)
	for { // the client reconnects
		d, err := l.Take(ctx, r)
		if err == nil && d.Allowed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Take after the cut = %+v, %v; want allowed", d, err)
		}
	}
	v, err := redistest.Do(srv.Addr, "GET", rs.Key(key))
	if err != nil {
		t.Fatal(err)
	}
	var w, n, m int64
	if _, err := fmt.Sscan(v, &w, &n, &m); err != nil {
		t.Fatalf("GET %s = %q: %v", rs.Key(key), v, err)
	}
	if m != 3 {
		t.Fatalf("the previous window counts %d in Redis (state %q), want 3 (admitted in it)", m, v)
	}
}

// cutLease starts a Redis and a Lease (chunks of 10) on it through a
// Cutter whose marker is the key it returns, unique to the test.
func cutLease(t *testing.T, name string) (*redistest.Server, *redistest.Cutter, *redisstore.Store, *fleet.Lease, string) {
	t.Helper()
	srv := redistest.StartServer(t)
	key := fmt.Sprintf("%s-%d", name, time.Now().UnixNano())
	cut := redistest.NewCutter(t, srv.Addr, key, false)
	rs := fleet.OpenRedis(t, redisstore.Options{Addrs: []string{cut.Addr}})
	l, err := fleet.NewLease(rs, fleet.LeaseOptions{Chunk: 10})
	if err != nil {
		t.Fatal(err)
	}
	return srv, cut, rs, l, key
}

// TestLeaseGrantReplyLost loses the reply of a reservation after Redis ran
// it: its units are held by nobody, and the fleet admits less by exactly
// that reservation, never more: a chunk (10), or, for a request that needs
// more than the units held and a chunk, what it needs (41 for a cost of 50
// with 9 held).
func TestLeaseGrantReplyLost(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cost, lost int64
	}{{"chunk", 10, 10}, {"cost past the chunk", 50, 41}} {
		t.Run(tc.name, func(t *testing.T) {
			srv, cut, rs, l, key := cutLease(t, "lostgrant")
			ctx := context.Background()
			now := time.Now()
			r := sluice.Request{Key: key, Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(1000), Cost: 1, Now: now}
			admitted := int64(0)
			for i := range 2 { // cold, then a grant of 10, one spent: 9 held
				if d, err := l.Take(ctx, r); err != nil || !d.Allowed {
					t.Fatalf("Take %d = %+v, %v; want allowed", i, d, err)
				}
				admitted++
			}
			big := r
			big.Cost = tc.cost // more than the 9 held: a reservation
			cut.Arm()
			if _, err := l.Take(ctx, big); err == nil {
				t.Fatalf("Take(cost %d) whose grant lost its reply succeeded", tc.cost)
			}
			if !cut.Cut() {
				t.Fatalf("no reply was lost: the test did not cut")
			}
			deadline := time.Now().Add(10 * time.Second)
			for { // the client reconnects; the 9 held are spent locally
				d, err := l.Take(ctx, r)
				if err == nil && d.Allowed {
					admitted++
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("Take after the cut = %+v, %v; want allowed", d, err)
				}
			}
			if err := l.CloseAt(now); err != nil {
				t.Fatalf("CloseAt: %v", err)
			}
			if got := count(t, srv.Addr, rs.Key(key)); got != fmt.Sprint(admitted+tc.lost) {
				t.Errorf("Redis counts %s after the lost grant and Close, want %d: the %d admitted and the %d of the lost reservation", got, admitted+tc.lost, admitted, tc.lost)
			}
		})
	}
}
