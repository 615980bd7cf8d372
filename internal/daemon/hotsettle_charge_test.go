package daemon

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
)

// The settle charges what each of ten moved keys gained since the last
// reading to the counter it went to. The charges are independent (each a
// forced charge of its own key), so they go out together (chargeAll) and
// the client sends the calls waiting for a node in one write. One after
// another, a charge took its own round trips: to the shards, one on each
// of three nodes (across slots, reports alone are taken at once: checked
// first, two), back, one: with the reading (3 and 6 round trips), 33 (63
// with the check) and 16 in all here. Together, 8–19 and 9–13 in runs
// under the race detector (at best 6 and 9: the masters times a reading's
// and a charge's steps); how many calls share a write depends on when
// they reach the client, so what is checked is fewer than one after
// another. And each key's counter is charged what it gained, 10, exactly
// (day-long windows, a bucket refilling a unit in 864 s).
func TestSettleChargesPipelined(t *testing.T) {
	t.Parallel() // Clusters and daemons of its own
	for _, c := range []struct {
		step     string
		back     bool
		oneByOne int64
	}{
		{"to the shards", false, 3 + 10*3},
		{"back to their own keys", true, 6 + 10},
	} {
		t.Run(c.step, func(t *testing.T) {
			f := newChargeFixture(t, c.back)
			ks := f.takeLate(10)
			before := roundTripsFrom(t, f.addrs)
			f.settleOnce(c.step)
			n := roundTrips(t, f.addrs) - before
			t.Logf("%s: 10 moved keys read and charged in %d round trips", c.step, n)
			if n >= c.oneByOne {
				t.Errorf("%s: 10 moved keys read and charged in %d round trips, want fewer than one charge after another, %d", c.step, n, c.oneByOne)
			}
			f.checkCharged(ks, -1, 10)
		})
	}
}

// A charge that fails is that move's alone: the others are charged and
// read on. One key's own counter here is a Redis set (WRONGTYPE to the
// scripts): coming back, its charge fails, and it is not read again
// (logged); the other nine are charged their 10 and read on.
func TestSettleChargeFailsAlone(t *testing.T) {
	t.Parallel() // a Cluster and daemons of its own
	f := newChargeFixture(t, true)
	ks := f.takeLate(10)
	bad := 4
	c := f.s.Client()
	key := f.s.KeyOf(&ks[bad].req)
	for _, err := range []error{
		c.Do(f.ctx, c.B().Del().Key(key).Build()).Error(),
		c.Do(f.ctx, c.B().Sadd().Key(key).Member("not a counter").Build()).Error(),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	xs := f.a.takeSettles()
	for i := range xs {
		xs[i].left = 2
	}
	f.a.settle(f.ctx, f.a.cur.Load(), f.s, xs, nil, f.at, 3)
	if got := len(f.a.settles); got != 9 {
		t.Errorf("%d moves read on after the settle, want the 9 whose charge succeeded", got)
	}
	for _, x := range f.a.settles {
		if x.key == ks[bad].key {
			t.Errorf("the move of %q, whose charge failed, is read on", x.key)
		}
	}
	f.checkCharged(ks, bad, 10)
}

// newChargeFixture is a settleFixture whose ten keys moved to their
// shards (or back, too), at rates of a day (a bucket refills a unit in
// 864 s), settled once with nothing taken (the scripts loaded on every
// node).
func newChargeFixture(t *testing.T, back bool) *settleFixture {
	t.Helper()
	f := newSettleFixtureAt(t, "100/d", "100/d")
	// The sliding window counter's sub-windows are 12 h long: a charge is
	// read in the one it went to.
	redistest.ClearOfWindowEdge(t, 12*time.Hour, 5*time.Minute)
	f.toShards()
	if back {
		f.back()
	}
	f.settleOnce("nothing taken")
	return f
}

// movedKey is one of a settleFixture's keys, moved: its request, the
// counters it left and went to, and what the one it went to had used
// before the settle.
type movedKey struct {
	rule, key string
	req       sluice.Request
	left, to  []sluice.Request
	used      int64
}

// takeLate has a late instance take n of every key on the counter it
// left (decided on Redis itself), and returns the keys.
func (f *settleFixture) takeLate(n int64) []movedKey {
	f.t.Helper()
	gen := f.a.cur.Load()
	var ks []movedKey
	for _, rule := range f.rules {
		for _, key := range f.keys[rule] {
			req, ok := hotRequest(gen, rule, key)
			if !ok {
				f.t.Fatalf("%s %q: no request", rule, key)
			}
			req.Now = f.at
			k := movedKey{rule: rule, key: key, req: req, left: []sluice.Request{req}, to: f.s.Shards(req, 3)}
			hot := f.a.hot.Rule(rule).IsHot(key)
			if !hot {
				k.left, k.to = k.to, k.left
			}
			k.used = f.used(k.to)
			take := req
			take.Cost = n
			if hot {
				d, err := f.s.Take(f.ctx, take)
				if err != nil || !d.Allowed {
					f.t.Fatalf("%s %q: took %d late: %+v, %v", rule, key, n, d, err)
				}
			} else {
				parts := f.s.Spread(take, 3)
				ds := make([]sluice.Decision, len(parts))
				if err := f.s.TakeAll(f.ctx, parts, ds); err != nil || !sluice.AllAllowed(ds) {
					f.t.Fatalf("%s %q: took %d late on its shards: %+v, %v", rule, key, n, ds, err)
				}
			}
			ks = append(ks, k)
		}
	}
	return ks
}

// checkCharged checks that every key but ks[bad] (-1: none) had the
// counter it went to charged n.
func (f *settleFixture) checkCharged(ks []movedKey, bad int, n int64) {
	f.t.Helper()
	for i, k := range ks {
		if i == bad {
			continue // not a counter: not read
		}
		want := k.used + n
		if got := f.used(k.to); got != want {
			f.t.Errorf("%s %q: the counter it went to used %d after the settle, want %d (%d before)", k.rule, k.key, got, want, k.used)
		}
	}
}

// used is what the counters rs have used together, read in Redis.
func (f *settleFixture) used(rs []sluice.Request) int64 {
	f.t.Helper()
	r, err := readCounters(f.ctx, f.s, rs)
	if err != nil {
		f.t.Fatal(err)
	}
	return r.used()
}

// chargeAll runs a refresh's charges together, up to maxCharges at once:
// 70 charges (of 70 keys, every other one to its shards) through the
// engine's store, each held until maxCharges are in flight, all 64 were
// (one after another, the first waited alone until its context ended),
// never more; each counter is charged its cost; and a context that has
// ended runs none.
func TestSettleChargesTogether(t *testing.T) {
	t.Parallel() // a Cluster and daemons of its own
	f := newSettleFixtureAt(t, "100/d", "100/d")
	r := f.a.engine().Rules().Rule("log")
	var cs []hotCharge
	for i := range 70 {
		req := sluice.Request{Key: r.Name + "|" + r.Fingerprint + "|charged" + strconv.Itoa(i), Algorithm: r.Algorithm, Limit: r.Limit, Now: f.t0}
		cs = append(cs, hotCharge{req: req, cost: int64(1 + i%5), shards: i%2 == 0})
	}
	st := &togetherStore{Store: f.a.engine().Store(), want: maxCharges, all: make(chan struct{})}
	ctx, cancel := context.WithTimeout(f.ctx, 30*time.Second)
	defer cancel()
	for i, err := range chargeAll(ctx, st, f.s, cs, 3) {
		if err != nil {
			t.Errorf("charge %d: %v", i, err)
		}
	}
	if st.most != maxCharges {
		t.Errorf("%d charges in flight at most, want %d (of %d)", st.most, maxCharges, len(cs))
	}
	for _, c := range cs {
		to := []sluice.Request{c.req}
		if c.shards {
			to = f.s.Shards(c.req, 3)
		}
		if got := f.used(to); got != c.cost {
			t.Errorf("%q (to its shards: %v): used %d after the charge, want %d", c.req.Key, c.shards, got, c.cost)
		}
	}
	cancel()
	st = &togetherStore{Store: f.a.engine().Store(), want: 1, all: make(chan struct{})}
	for i, err := range chargeAll(ctx, st, f.s, cs, 3) {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("charge %d, its context cancelled: %v, want %v", i, err, context.Canceled)
		}
	}
	if st.arrived != 0 {
		t.Errorf("%d charges run, their context cancelled, want none", st.arrived)
	}
}

// togetherStore holds each Take and TakeAll until want have arrived (or
// its context ends), counting how many were in flight at most.
type togetherStore struct {
	sluice.Store
	want int
	all  chan struct{} // closed when want have arrived

	mu                    sync.Mutex
	arrived, flying, most int
}

func (s *togetherStore) wait(ctx context.Context) error {
	s.mu.Lock()
	s.arrived++
	s.flying++
	s.most = max(s.most, s.flying)
	if s.arrived == s.want {
		close(s.all)
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.flying--
		s.mu.Unlock()
	}()
	select {
	case <-s.all:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *togetherStore) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	if err := s.wait(ctx); err != nil {
		return sluice.Decision{}, err
	}
	return s.Store.Take(ctx, r)
}

func (s *togetherStore) TakeAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	if err := s.wait(ctx); err != nil {
		return err
	}
	return s.Store.TakeAll(ctx, rs, ds)
}
