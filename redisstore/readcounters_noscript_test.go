package redisstore_test

import (
	"context"
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
