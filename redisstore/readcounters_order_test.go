package redisstore_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestReadCountersNoScriptKeepsOrder: a Redis that has lost some scripts
// (SCRIPT FLUSH, a restart; a Take since loaded its own again, the
// readings' not) answers NOSCRIPT to a reading's LoggedSince but runs its
// take: the units are still those logged before the take, and the state
// read after it, as the calls one by one read them (a take of cost 1,
// logged after After).
func TestReadCountersNoScriptKeepsOrder(t *testing.T) {
	srv := redistest.StartServer(t)
	o := redisstore.Options{Addrs: []string{srv.Addr}, Prefix: "piped:"}
	s := open(t, o)
	o.Prefix = "one:"
	one := open(t, o)
	ctx := context.Background()
	now := sluicetest.T0.Add(time.Minute)
	lg := sluice.Request{Key: "log", Algorithm: sluice.SlidingWindowLog, Limit: sluice.PerMinute(60), Cost: 1}
	ct := sluice.Request{Key: "counter", Algorithm: sluice.SlidingWindowCounter, Limit: sluice.PerMinute(60).WithSegments(3), Cost: 1}
	for i := range 3 {
		for _, r := range []sluice.Request{lg, ct} {
			r.Now = sluicetest.T0.Add(time.Duration(i) * 10 * time.Second)
			take(t, r, s, one)
		}
	}
	lg.Now, ct.Now = now, now
	after := sluicetest.T0.Add(5 * time.Second).UnixMicro()

	n := 2
	want := redisstore.Reading{Requests: []sluice.Request{lg, ct}, After: []int64{after, -1}, Decisions: make([]sluice.Decision, n),
		Units: make([]int64, n), States: make([]sluice.State, n), Clocks: make([]int64, n)}
	var err error
	if want.Units[0], want.Clocks[0], err = one.LoggedSince(ctx, lg, after); err != nil {
		t.Fatal(err)
	}
	if err := one.TakeAll(ctx, want.Requests, want.Decisions); err != nil {
		t.Fatal(err)
	}
	if want.States[1], want.Clocks[1], err = one.CounterState(ctx, ct); err != nil {
		t.Fatal(err)
	}

	c := s.Client()
	if err := c.Do(ctx, c.B().ScriptFlush().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	probe := sluice.Request{Key: "probe", Algorithm: sluice.TokenBucket, Limit: sluice.PerMinute(60), Now: now}
	if err := s.TakeAll(ctx, []sluice.Request{probe, probe}, make([]sluice.Decision, 2)); err != nil { // loads the take's script again
		t.Fatal(err)
	}
	rds := []redisstore.Reading{{Requests: want.Requests, After: want.After}}
	s.ReadCounters(ctx, rds)
	if rds[0].Err != nil {
		t.Fatal(rds[0].Err)
	}
	if !reflect.DeepEqual(rds[0], want) {
		t.Errorf("after SCRIPT FLUSH, a reading of units %v, states %+v; want %v, %+v (as one by one: units before the take, states after)",
			rds[0].Units, rds[0].States, want.Units, want.States)
	}
}

// TestReadCountersSameKeyInTurn: two readings of one key whose takes count
// (and a question of it between them) read as the calls one by one, one
// reading after the other, do: the second's units and state count the
// first's take. Readings of other keys still go together.
func TestReadCountersSameKeyInTurn(t *testing.T) {
	c := redistest.StartCluster(t)
	o := redisstore.Options{Addrs: c.Addrs, Cluster: true, Prefix: "piped:"}
	s := open(t, o)
	o.Prefix = "one:"
	one := open(t, o)
	ctx := context.Background()
	now := sluicetest.T0.Add(time.Minute)
	lg := sluice.Request{Key: "log", Algorithm: sluice.SlidingWindowLog, Limit: sluice.PerMinute(60), Cost: 1}
	ct := sluice.Request{Key: "counter", Algorithm: sluice.SlidingWindowCounter, Limit: sluice.PerMinute(60).WithSegments(3), Cost: 1}
	for i := range 3 {
		for _, r := range []sluice.Request{lg, ct} {
			r.Now = sluicetest.T0.Add(time.Duration(i) * 10 * time.Second)
			take(t, r, s, one)
		}
	}
	lg.Now, ct.Now = now, now
	after := sluicetest.T0.Add(5 * time.Second).UnixMicro()
	q := lg
	q.Cost = 0
	other := sluice.Request{Key: "other", Algorithm: sluice.SlidingWindowLog, Limit: sluice.PerMinute(60), Cost: 1, Now: now}
	rds := []redisstore.Reading{
		{Requests: []sluice.Request{lg, ct}, After: []int64{after, -1}},
		{Requests: []sluice.Request{q}, After: []int64{after}},
		{Requests: []sluice.Request{other}},
		{Requests: []sluice.Request{lg, ct}, After: []int64{after, -1}},
		{Requests: s.Shards(lg, 3)},
		{Requests: []sluice.Request{ct}},
	}
	want := make([]redisstore.Reading, len(rds))
	for j, rd := range rds {
		n := len(rd.Requests)
		w := redisstore.Reading{Requests: rd.Requests, After: rd.After, Decisions: make([]sluice.Decision, n), Units: make([]int64, n),
			States: make([]sluice.State, n), Clocks: make([]int64, n)}
		var err error
		for i, r := range rd.Requests {
			if r.Algorithm == sluice.SlidingWindowLog {
				a := int64(-1)
				if rd.After != nil {
					a = rd.After[i]
				}
				if w.Units[i], w.Clocks[i], err = one.LoggedSince(ctx, r, a); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := one.TakeAll(ctx, rd.Requests, w.Decisions); err != nil {
			t.Fatal(err)
		}
		for i, r := range rd.Requests {
			if r.Algorithm == sluice.SlidingWindowCounter {
				if w.States[i], w.Clocks[i], err = one.CounterState(ctx, r); err != nil {
					t.Fatal(err)
				}
			}
		}
		want[j] = w
	}
	s.ReadCounters(ctx, rds)
	for j := range rds {
		if rds[j].Err != nil {
			t.Fatalf("reading %d: %v", j, rds[j].Err)
		}
		if !reflect.DeepEqual(rds[j], want[j]) {
			t.Errorf("reading %d of %s: units %v, states %+v, decisions %+v;\n want %v, %+v, %+v (as one by one, in turn)",
				j, rds[j].Requests[0].Key, rds[j].Units, rds[j].States, rds[j].Decisions, want[j].Units, want[j].States, want[j].Decisions)
		}
	}
}

// TestReadCountersMasterDown: a master stopped between a reading's check
// across slots and its take fails that reading (the store unavailable),
// and the slots that took on the live masters give back what they took
// (nothing stays counted there), as TakeAll does; a reading of a key on
// that master alone fails too, and one of a key on a live master is read.
func TestReadCountersMasterDown(t *testing.T) {
	cl := redistest.StartCluster(t)
	s := open(t, redisstore.Options{Addrs: cl.Addrs, Cluster: true})
	ctx := context.Background()
	own := sluice.Request{Key: "down", Algorithm: sluice.TokenBucket, Limit: sluice.PerMinute(60), Cost: 1, Now: sluicetest.T0}
	qs := s.Shards(own, 6)
	for _, q := range qs {
		take(t, q, s)
	}
	downAddr := holder(t, cl, s, qs[0])
	onDown := map[string]bool{}
	var alone, live sluice.Request
	for _, q := range qs {
		onDown[q.Key] = holder(t, cl, s, q) == downAddr
		if onDown[q.Key] {
			alone = q
		} else {
			live = q
		}
	}
	if live.Key == "" {
		t.Fatal("every shard on one master")
	}
	before := map[string]string{}
	for _, q := range qs {
		before[q.Key] = raw(t, s, q)
	}
	var down *redistest.Server
	for _, n := range cl.Nodes {
		if n.Addr == downAddr {
			down = n
		}
	}
	redisstore.SetTakeAllHooks(func() { down.Stop() }, nil)
	defer redisstore.SetTakeAllHooks(nil, nil)
	other := live
	other.Cost = 0
	rds := []redisstore.Reading{{Requests: qs}, {Requests: []sluice.Request{alone}}, {Requests: []sluice.Request{other}}}
	s.ReadCounters(ctx, rds)
	redisstore.SetTakeAllHooks(nil, nil)
	for j, rd := range rds[:2] {
		if !errors.Is(rd.Err, sluice.ErrStoreUnavailable) {
			t.Errorf("reading %d with a master down: err %v, want ErrStoreUnavailable", j, rd.Err)
		}
	}
	if rds[2].Err != nil || !rds[2].Decisions[0].Allowed {
		t.Errorf("a question on a live master: %+v, %v; want it read", rds[2].Decisions, rds[2].Err)
	}
	if n := s.Refunds(); n != 1 {
		t.Errorf("%d refunds, want 1 (the live slots' takes given back)", n)
	}
	for _, q := range qs {
		if onDown[q.Key] {
			continue
		}
		if got := raw(t, s, q); got != before[q.Key] {
			t.Errorf("shard %s on a live master: %q after the reading, want %q (its take given back)", q.Key, got, before[q.Key])
		}
	}
}

// holder is the address of the master that holds r's key.
func holder(t *testing.T, cl *redistest.Cluster, s *redisstore.Store, r sluice.Request) string {
	t.Helper()
	for _, a := range cl.Addrs {
		if got, err := redistest.Do(a, "EXISTS", s.KeyOf(&r)); err == nil && got == "1" {
			return a
		}
	}
	t.Fatalf("%s on no live master", r.Key)
	return ""
}
