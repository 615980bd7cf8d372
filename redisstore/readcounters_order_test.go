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

// TestReadCountersNoScript: a Redis that has lost some scripts (SCRIPT
// FLUSH, a restart; a Take since loaded its own again, the readings' not)
// answers NOSCRIPT to a reading's LoggedSince and CounterState and runs
// its question: the calls sent again read what the calls one by one read.
func TestReadCountersNoScript(t *testing.T) {
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
	lg.Now, ct.Now, lg.Cost, ct.Cost = now, now, 0, 0
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
		t.Errorf("after SCRIPT FLUSH, a reading of units %v, states %+v; want %v, %+v (as one by one)",
			rds[0].Units, rds[0].States, want.Units, want.States)
	}
}

// TestReadCountersRefusesCharges: a reading only asks. One with a
// request of a cost fails (ErrInvalidCost) and counts nothing; the
// readings beside it are read.
func TestReadCountersRefusesCharges(t *testing.T) {
	srv := redistest.StartServer(t)
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}})
	ctx := context.Background()
	q := sluice.Request{Key: "ask", Algorithm: sluice.SlidingWindowLog, Limit: sluice.PerMinute(60), Now: sluicetest.T0}
	charge := q
	charge.Key, charge.Cost = "charge", 1
	rds := []redisstore.Reading{{Requests: []sluice.Request{q, charge}}, {Requests: []sluice.Request{q}}}
	s.ReadCounters(ctx, rds)
	if !errors.Is(rds[0].Err, sluice.ErrInvalidCost) {
		t.Errorf("a reading with a charge: err %v, want ErrInvalidCost", rds[0].Err)
	}
	if rds[1].Err != nil || !rds[1].Decisions[0].Allowed || rds[1].Decisions[0].Remaining != 60 {
		t.Errorf("the question beside it: %+v, %v; want it read (60 left)", rds[1].Decisions, rds[1].Err)
	}
	if got := raw(t, s, charge); got != "none" {
		t.Errorf("the charge's key after the reading: %q, want nothing counted", got)
	}
}

// TestReadCountersMasterDown: a master stopped between a reading's check
// across slots and its take fails that reading (the store unavailable),
// and the slots taken on the live masters are given back, as TakeAll
// does (one refund; their keys as they were); readings of one slot, on
// that master or another, were read in the first round.
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
	for i := range qs { // the reading's questions
		qs[i].Cost = 0
	}
	alone.Cost, live.Cost = 0, 0
	redisstore.SetTakeAllHooks(t, func() { down.Stop() }, nil)
	defer redisstore.SetTakeAllHooks(t, nil, nil)
	rds := []redisstore.Reading{{Requests: qs}, {Requests: []sluice.Request{alone}}, {Requests: []sluice.Request{live}}}
	s.ReadCounters(ctx, rds)
	redisstore.SetTakeAllHooks(t, nil, nil)
	if !errors.Is(rds[0].Err, sluice.ErrStoreUnavailable) {
		t.Errorf("the reading across slots with a master down: err %v, want ErrStoreUnavailable", rds[0].Err)
	}
	// A reading of one slot is read in one round, with the checks, before
	// the master stopped.
	for j, rd := range rds[1:] {
		if rd.Err != nil || !rd.Decisions[0].Allowed {
			t.Errorf("reading %d, of one slot: %+v, %v; want it read", j+1, rd.Decisions, rd.Err)
		}
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
