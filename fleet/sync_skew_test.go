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

// TestSyncClockAhead: over a store on Redis' clock (RedisTime, as the
// daemon runs it), an instance whose clock runs an hour ahead decides on
// Redis' clock too. Deciding on its own, it saw an hour of refill that had
// not happened (12 admitted by a bucket of 10), and its hits, stamped an
// hour ahead, moved the key's state there: every other instance, deciding
// on Redis' clock, saw the bucket full of debt for an hour.
func TestSyncClockAhead(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	st := fleet.OpenRedis(t, redisstore.Options{Addrs: []string{srv.Addr}, RedisTime: true})
	s := newSync(t, st, fleet.SyncOptions{Interval: time.Hour}) // batches by Flush only
	key := fmt.Sprintf("skew/%d", time.Now().UnixNano())
	ahead := func() sluice.Request {
		return sluice.Request{Key: key, Algorithm: sluice.TokenBucket, Limit: sluice.PerHour(10), Cost: 1, Now: time.Now().Add(time.Hour)}
	}
	admitted := 0
	for range 12 { // no token refills on Redis' clock meanwhile (one in 6 minutes)
		d, err := s.Take(ctx, ahead())
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted != 10 {
		t.Errorf("an instance an hour ahead admitted %d of 12 at once, want the burst of 10", admitted)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	// The key's state is on Redis' clock (this machine's): its bucket's
	// time is now, not an hour ahead, where every other instance,
	// deciding on Redis' clock, would find it full of debt for an hour.
	if at := stateTime(t, st, key, sluice.PerHour(10)); at.After(time.Now().Add(time.Minute)) {
		t.Errorf("after the instance an hour ahead spent the burst, the key's state is at %v, want now (%v)", at, time.Now())
	}
}

// stateTime reads key's token bucket state in Redis without changing it,
// and returns its time (the bucket's last refill).
func stateTime(t *testing.T, st *redisstore.Store, key string, l sluice.Limit) time.Time {
	t.Helper()
	op := readState(t, st, key, l)
	tk, err := l.Ticks()
	if err != nil {
		t.Fatal(err)
	}
	return time.UnixMicro(op.State.T * tk.Tick)
}

// readState reads key's token bucket state in Redis without changing it.
func readState(t *testing.T, st *redisstore.Store, key string, l sluice.Limit) redisstore.SyncOp {
	t.Helper()
	ops := []redisstore.SyncOp{{Key: key, Algorithm: sluice.TokenBucket, Limit: l}}
	if err := st.Sync(context.Background(), ops); err != nil {
		t.Fatal(err)
	}
	return ops[0]
}

// TestSyncClockBehind: an instance whose clock runs an hour behind Redis'
// sees the bucket refill as Redis does. Deciding on its own clock it saw
// the state Redis stamped an hour after its now, and no refill at all
// until its clock caught up: it refused the key for an hour.
func TestSyncClockBehind(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	st := fleet.OpenRedis(t, redisstore.Options{Addrs: []string{srv.Addr}, RedisTime: true})
	s := newSync(t, st, fleet.SyncOptions{Interval: time.Hour})
	key := fmt.Sprintf("skew/%d", time.Now().UnixNano())
	limit := sluice.PerSecond(20)
	behind := func() sluice.Request {
		return sluice.Request{Key: key, Algorithm: sluice.TokenBucket, Limit: limit, Cost: 1, Now: time.Now().Add(-time.Hour)}
	}
	for range 25 { // the burst, and some
		if _, err := s.Take(ctx, behind()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	// Wait, on Redis' clock, until the bucket is full again (a second),
	// as a probe deciding there sees it.
	for {
		op := readState(t, st, key, limit)
		var d sluice.Decision
		if _, err := sluice.TokenBucket.TakeMicro(&d, &op.State, &limit, op.Now, 0); err != nil {
			t.Fatal(err)
		}
		if d.Remaining == limit.Rate {
			break
		}
		time.Sleep(50 * time.Millisecond) // polling Redis' clock, which the test cannot move
	}
	s.Age(2 * time.Hour) // its view is read again: Redis' full bucket
	d, err := s.Take(ctx, behind())
	if err != nil {
		t.Fatal(err)
	}
	if !d.Allowed {
		t.Errorf("an instance an hour behind, once Redis' bucket refilled: refused (retry after %v), want admitted", d.RetryAfter)
	}
}

// TestSyncClockAheadTakeAll: the same through TakeAll, whose keys are read
// (not decided) in the store before their first local decision: the read
// tells the store's clock too.
func TestSyncClockAheadTakeAll(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	st := fleet.OpenRedis(t, redisstore.Options{Addrs: []string{srv.Addr}, RedisTime: true})
	s := newSync(t, st, fleet.SyncOptions{Interval: time.Hour})
	base := fmt.Sprintf("skew/%d/", time.Now().UnixNano())
	admitted := 0
	for range 12 {
		now := time.Now().Add(time.Hour)
		rs := []sluice.Request{
			{Key: base + "a", Algorithm: sluice.TokenBucket, Limit: sluice.PerHour(10), Cost: 1, Now: now},
			{Key: base + "b", Algorithm: sluice.TokenBucket, Limit: sluice.PerHour(100), Cost: 1, Now: now},
		}
		ds := make([]sluice.Decision, len(rs))
		if err := s.TakeAll(ctx, rs, ds); err != nil {
			t.Fatal(err)
		}
		if sluice.AllAllowed(ds) {
			admitted++
		}
	}
	if admitted != 10 {
		t.Errorf("an instance an hour ahead admitted %d of 12 TakeAlls at once, want the burst of 10", admitted)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if at := stateTime(t, st, base+"a", sluice.PerHour(10)); at.After(time.Now().Add(time.Minute)) {
		t.Errorf("after the instance an hour ahead spent the burst, the key's state is at %v, want now (%v)", at, time.Now())
	}
}

// TestLeaseClockSkew: a Lease over a store on Redis' clock spends its units
// on Redis' clock too, whatever its own says: an instance an hour ahead or
// behind admits the bucket's burst of 10 at once, no more (it reads the
// distance from every grant).
func TestLeaseClockSkew(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	st := fleet.OpenRedis(t, redisstore.Options{Addrs: []string{srv.Addr}, RedisTime: true})
	for _, skew := range []time.Duration{time.Hour, -time.Hour} {
		l, err := fleet.NewLease(st, fleet.LeaseOptions{})
		if err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("skew/lease/%d", time.Now().UnixNano())
		admitted := 0
		for range 12 { // no token refills on Redis' clock meanwhile (one in 6 minutes)
			d, err := l.Take(ctx, sluice.Request{Key: key, Algorithm: sluice.TokenBucket, Limit: sluice.PerHour(10), Cost: 1, Now: time.Now().Add(skew)})
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				admitted++
			}
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if admitted != 10 {
			t.Errorf("a Lease %v off Redis' clock admitted %d of 12 at once, want the burst of 10", skew, admitted)
		}
	}
}
