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
// on Redis' clock, saw the bucket full of debt for an hour. Over one Redis
// and a 3-node Cluster.
func TestSyncClockAhead(t *testing.T) {
	onServerAndCluster(t, testSyncClockAhead)
}

func testSyncClockAhead(t *testing.T, o redisstore.Options) {
	o.RedisTime = true
	ctx := context.Background()
	st := fleet.OpenRedis(t, o)
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
// until its clock caught up: it refused the key for an hour. Over one
// Redis and a 3-node Cluster.
func TestSyncClockBehind(t *testing.T) {
	onServerAndCluster(t, testSyncClockBehind)
}

func testSyncClockBehind(t *testing.T, o redisstore.Options) {
	o.RedisTime = true
	ctx := context.Background()
	st := fleet.OpenRedis(t, o)
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
	// Wait, on Redis' clock (which the test cannot move), until the bucket
	// is full again, as a probe deciding there sees it: each wait is the
	// probe's ResetAfter, the time until full on Redis' clock (a second
	// at most). The bound is a safety net, not a timing assertion: a
	// state Redis never sees refill (stamped an hour ahead, say) fails
	// the test here, instead of hanging it until go test's timeout.
	const bound = 30 * time.Second
	for deadline := time.Now().Add(bound); ; {
		op := readState(t, st, key, limit)
		var d sluice.Decision
		if _, err := sluice.TokenBucket.TakeMicro(&d, &op.State, &limit, op.Now, 0); err != nil {
			t.Fatal(err)
		}
		if d.Remaining == limit.Rate {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis' bucket for %q not full %v after the flush (a second's refill): %d of %d left, full in %v on Redis' clock (state %+v, Redis' now %v)",
				key, bound, d.Remaining, limit.Rate, d.ResetAfter, op.State, time.UnixMicro(op.Now))
		}
		time.Sleep(max(d.ResetAfter, time.Millisecond))
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
// tells the store's clock too. Over one Redis and a 3-node Cluster, where
// the two keys are on different masters.
func TestSyncClockAheadTakeAll(t *testing.T) {
	onServerAndCluster(t, testSyncClockAheadTakeAll)
}

func testSyncClockAheadTakeAll(t *testing.T, o redisstore.Options) {
	o.RedisTime = true
	ctx := context.Background()
	st := fleet.OpenRedis(t, o)
	s := newSync(t, st, fleet.SyncOptions{Interval: time.Hour})
	keys := keysApart(t, o, st, fmt.Sprintf("skew/%d/", time.Now().UnixNano()), 2)
	admitted := 0
	for range 12 {
		now := time.Now().Add(time.Hour)
		rs := []sluice.Request{
			{Key: keys[0], Algorithm: sluice.TokenBucket, Limit: sluice.PerHour(10), Cost: 1, Now: now},
			{Key: keys[1], Algorithm: sluice.TokenBucket, Limit: sluice.PerHour(100), Cost: 1, Now: now},
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
	for i, l := range []sluice.Limit{sluice.PerHour(10), sluice.PerHour(100)} {
		if at := stateTime(t, st, keys[i], l); at.After(time.Now().Add(time.Minute)) {
			t.Errorf("after the instance an hour ahead spent the burst, key %q's state is at %v, want now (%v)", keys[i], at, time.Now())
		}
	}
}

// TestLeaseClockSkew: a Lease over a store on Redis' clock spends its units
// on Redis' clock too, whatever its own says: an instance an hour ahead or
// behind admits the bucket's burst of 10 at once, no more (it reads the
// distance from every grant). Over one Redis and a 3-node Cluster.
func TestLeaseClockSkew(t *testing.T) {
	onServerAndCluster(t, testLeaseClockSkew)
}

func testLeaseClockSkew(t *testing.T, o redisstore.Options) {
	o.RedisTime = true
	ctx := context.Background()
	st := fleet.OpenRedis(t, o)
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

// TestSyncClockPerKeyCluster: on a Cluster, each key is decided on its
// own master's clock, and so are its local decisions: the distance a Sync
// moves them by is the one its own key's calls measured, not the last
// call's, which may have gone to another master. The distance is the
// requests' clock minus the master's; a test cannot move a real master's
// clock (libfaketime hangs Debian's redis-server, jemalloc, at start), so
// it moves the other term: key b's requests run an hour behind key a's,
// which to the Sync is what a master of b an hour ahead of a's is. Before,
// Sync kept one distance, the last measured: b's read set it to 0, and a,
// decided an hour ahead of its master, saw its bucket refilled.
func TestSyncClockPerKeyCluster(t *testing.T) {
	t.Parallel() // a Cluster (or Redis) and stores of its own
	c := redistest.StartCluster(t)
	ctx := context.Background()
	o := redisstore.Options{Addrs: c.Addrs, Cluster: true, RedisTime: true}
	st := fleet.OpenRedis(t, o)
	s := newSync(t, st, fleet.SyncOptions{Interval: time.Hour}) // batches by Flush only
	// a on the first node's master, b on another's.
	keys := keysApart(t, o, st, fmt.Sprintf("skew/cluster/%d/", time.Now().UnixNano()), 2)
	a, b := keys[0], keys[1]
	limit := sluice.PerHour(10)
	take := func(key string, skew time.Duration) bool {
		t.Helper()
		d, err := s.Take(ctx, sluice.Request{Key: key, Algorithm: sluice.TokenBucket, Limit: limit, Cost: 1, Now: time.Now().Add(skew)})
		if err != nil {
			t.Fatal(err)
		}
		return d.Allowed
	}
	admitted := 0
	for range 5 { // a's first (in the store), its read, and local decisions
		if take(a, time.Hour) {
			admitted++
		}
	}
	for range 3 { // b's first, its read (measuring b's distance), one local
		take(b, 0)
	}
	for range 10 { // a again: 5 tokens left, none refilled on its master's clock
		if take(a, time.Hour) {
			admitted++
		}
	}
	if admitted != 10 {
		t.Errorf("key a, an hour ahead of its master, admitted %d of 15 at once, want the burst of 10 (its distance taken from b's master)", admitted)
	}
}

// TestSyncClockJumpHotKey: an instance's clock that jumps while a key
// stays hot (decided every interval, so never read again on its own) is
// picked up by the next batch: each batch measures the distance again,
// from Redis' clock in its reply. Here the clock jumps back an hour after
// GCRA's bucket is spent: until a batch, the instance decides an hour
// before the state's time, counts an hour more of debt, and tells a
// refused request to retry in an hour and 6 minutes; after it, in 6
// minutes, as Redis' clock has it. Before,
// the distance was measured only by a key's first decision or read in
// Redis, and stayed an hour off for as long as the key stayed hot. Over
// one Redis and a 3-node Cluster.
func TestSyncClockJumpHotKey(t *testing.T) {
	onServerAndCluster(t, testSyncClockJumpHotKey)
}

func testSyncClockJumpHotKey(t *testing.T, o redisstore.Options) {
	o.RedisTime = true
	ctx := context.Background()
	st := fleet.OpenRedis(t, o)
	s := newSync(t, st, fleet.SyncOptions{Interval: time.Hour}) // batches by Flush only
	key := fmt.Sprintf("skew/jump/%d", time.Now().UnixNano())
	limit := sluice.PerHour(10) // a token every 6 minutes
	take := func(jump time.Duration) sluice.Decision {
		t.Helper()
		d, err := s.Take(ctx, sluice.Request{Key: key, Algorithm: sluice.GCRA, Limit: limit, Cost: 1, Now: time.Now().Add(jump)})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for range 10 { // the burst: the first in the store, the rest on the view
		if d := take(0); !d.Allowed {
			t.Fatalf("within the burst: refused (retry after %v)", d.RetryAfter)
		}
	}
	if err := s.Flush(); err != nil { // the key is hot: in every batch
		t.Fatal(err)
	}
	const jump = -time.Hour
	if d := take(jump); d.Allowed || d.RetryAfter < time.Hour {
		// Not what is tested (the batch after is): a sign the setup is not
		// what it means to be.
		t.Fatalf("just after the jump, before a batch: allowed %v, retry after %v; want refused for over an hour, the distance not yet measured again", d.Allowed, d.RetryAfter)
	}
	// An interval passes (on this machine's clock, which a test with a
	// real Redis cannot move): the next batch reads the key, though its
	// requests since the last one were refused (no hits to send).
	s.Age(time.Hour)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	d := take(jump)
	if d.Allowed || d.RetryAfter > 6*time.Minute {
		t.Errorf("a batch after the clock jumped an hour back: allowed %v, retry after %v; want refused, retry within 6 minutes (Redis' clock)", d.Allowed, d.RetryAfter)
	}
}
