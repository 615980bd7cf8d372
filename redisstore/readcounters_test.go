package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// ReadCounters reads what LoggedSince, TakeAll and CounterState called one
// after another read, for every algorithm, a key alone and its shards
// across the Cluster's slots, with segments, in debt past the limit (the
// check across slots denies a question, and nothing is taken), at one
// instant on the requests' clock: the same decisions, units, states and
// instants, from keys of the same history (two stores on one Cluster, of
// two prefixes). A reading that cannot be asked fails alone. On a single
// Redis too.
func TestReadCountersAsOneByOne(t *testing.T) {
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t)
		readAsOneByOne(t, redisstore.Options{Addrs: c.Addrs, Cluster: true})
	})
	t.Run("single", func(t *testing.T) {
		srv := redistest.StartServer(t)
		readAsOneByOne(t, redisstore.Options{Addrs: []string{srv.Addr}})
	})
}

func readAsOneByOne(t *testing.T, o redisstore.Options) {
	o.Prefix = "piped:"
	s := open(t, o)
	o.Prefix = "one:"
	one := open(t, o)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 8))
	now := sluicetest.T0.Add(time.Minute)
	var rds []redisstore.Reading
	for _, alg := range sluice.Algorithms() {
		for _, l := range []sluice.Limit{sluice.PerMinute(60), sluice.PerMinute(60).WithSegments(3)} {
			if l.Segments > 1 && alg != sluice.SlidingWindowCounter {
				continue
			}
			for _, debt := range []bool{false, true} {
				own := sluice.Request{Key: fmt.Sprintf("read/%v/%d/%v", alg, l.Segments, debt), Algorithm: alg, Limit: l}
				for _, reqs := range [][]sluice.Request{{own}, s.Shards(own, 3)} {
					for i, r := range reqs {
						for range rng.IntN(20) {
							r.Cost, r.Now = 1+rng.Int64N(4), sluicetest.T0.Add(time.Duration(rng.Int64N(int64(time.Minute))))
							take(t, r, s, one)
						}
						if debt && i == 0 { // the other shards' checks allow
							r.Cost, r.Force, r.Now = 200, true, now
							take(t, r, s, one)
						}
					}
					qs := make([]sluice.Request, len(reqs))
					after := make([]int64, len(reqs))
					for i, r := range reqs {
						r.Now = now
						qs[i], after[i] = r, sluicetest.T0.Add(time.Duration(rng.Int64N(int64(time.Minute)))).UnixMicro()
					}
					rds = append(rds, redisstore.Reading{Requests: qs, After: after})
				}
			}
		}
	}
	bad := sluice.Request{Key: "read/bad", Algorithm: sluice.TokenBucket, Limit: sluice.PerMinute(60), Cost: -1, Now: now}
	rds = append(rds, redisstore.Reading{Requests: []sluice.Request{bad}}, redisstore.Reading{Requests: rds[0].Requests, After: []int64{1, 2}})
	want := make([]redisstore.Reading, len(rds))
	for j, rd := range rds[:len(rds)-2] {
		n := len(rd.Requests)
		w := redisstore.Reading{Requests: rd.Requests, After: rd.After, Decisions: make([]sluice.Decision, n), Units: make([]int64, n),
			States: make([]sluice.State, n), Clocks: make([]int64, n)}
		for i, r := range rd.Requests {
			if r.Algorithm == sluice.SlidingWindowLog {
				var err error
				if w.Units[i], w.Clocks[i], err = one.LoggedSince(ctx, r, rd.After[i]); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := one.TakeAll(ctx, rd.Requests, w.Decisions); err != nil {
			t.Fatal(err)
		}
		for i, r := range rd.Requests {
			if r.Algorithm != sluice.SlidingWindowLog {
				var err error
				if w.States[i], w.Clocks[i], err = one.CounterState(ctx, r); err != nil {
					t.Fatal(err)
				}
			}
		}
		want[j] = w
	}
	denied := 0
	s.ReadCounters(ctx, rds)
	for j, rd := range rds[:len(rds)-2] {
		if rd.Err != nil {
			t.Errorf("reading %d (%s): %v", j, rd.Requests[0].Key, rd.Err)
			continue
		}
		if !reflect.DeepEqual(rd, want[j]) {
			t.Errorf("reading %d (%s):\n ReadCounters %+v\n one by one   %+v", j, rd.Requests[0].Key, rd, want[j])
		}
		if !sluice.AllAllowed(rd.Decisions) {
			denied++
		}
	}
	// And both stores hold the same: the readings wrote what the calls
	// one by one did (a question's take saves its key's state; a check
	// saves nothing).
	for _, rd := range rds[:len(rds)-2] {
		for _, r := range rd.Requests {
			if got, want := raw(t, s, r), raw(t, one, r); got != want {
				t.Errorf("%s: Redis holds %q after ReadCounters, %q after the calls one by one", r.Key, got, want)
			}
		}
	}
	if denied == 0 {
		t.Error("no reading in debt was denied: the check across slots went untested")
	}
	if err := rds[len(rds)-2].Err; !errors.Is(err, sluice.ErrInvalidCost) {
		t.Errorf("a negative cost: err = %v, want ErrInvalidCost", err)
	}
	if err := rds[len(rds)-1].Err; err == nil {
		t.Error("2 instants after for 1 request: no error")
	}
}

// take has every store of ss take r.
func take(t *testing.T, r sluice.Request, ss ...*redisstore.Store) {
	t.Helper()
	for _, s := range ss {
		if _, err := s.Take(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
}

// raw is what Redis holds of r's key in s: its string, or its hash's
// fields in order.
func raw(t *testing.T, s *redisstore.Store, r sluice.Request) string {
	t.Helper()
	c, key := s.Client(), s.KeyOf(&r)
	typ, err := c.Do(context.Background(), c.B().Type().Key(key).Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	switch typ {
	case "string":
		v, err := c.Do(context.Background(), c.B().Get().Key(key).Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		return v
	case "hash":
		m, err := c.Do(context.Background(), c.B().Hgetall().Key(key).Build()).AsStrMap()
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(m) // fmt prints a map's keys in order
	}
	return typ
}

// A reading whose questions span slots is checked, then taken, as TakeAll
// does; a slot that denies at the take (another client's charge came in
// between) has the other slots give back what they took, and the states
// are read after that.
func TestReadCountersRefund(t *testing.T) {
	c := redistest.StartCluster(t)
	s := open(t, redisstore.Options{Addrs: c.Addrs, Cluster: true})
	ctx := context.Background()
	own := sluice.Request{Key: "refund", Algorithm: sluice.SlidingWindowCounter, Limit: sluice.PerMinute(60).WithSegments(2), Now: sluicetest.T0}
	qs := s.Shards(own, 3)
	for _, q := range qs {
		q.Cost = 5
		take(t, q, s)
	}
	charge := qs[1]
	charge.Cost, charge.Force = 100, true
	redisstore.SetTakeAllHooks(t, func() { take(t, charge, s) }, nil)
	defer redisstore.SetTakeAllHooks(t, nil, nil)
	rds := []redisstore.Reading{{Requests: qs}}
	s.ReadCounters(ctx, rds)
	redisstore.SetTakeAllHooks(t, nil, nil)
	rd := rds[0]
	if rd.Err != nil {
		t.Fatal(rd.Err)
	}
	if rd.Decisions[1].Allowed || !rd.Decisions[0].Allowed || !rd.Decisions[2].Allowed {
		t.Errorf("decisions %+v: want the take's, the charged shard's denied", rd.Decisions)
	}
	if n := s.Refunds(); n != 1 {
		t.Errorf("%d refunds, want 1", n)
	}
	for i, q := range qs {
		st, clock, err := s.CounterState(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(rd.States[i], st) || rd.Clocks[i] != clock {
			t.Errorf("shard %d: state %+v at %d, want %+v at %d (read after the refund)", i, rd.States[i], rd.Clocks[i], st, clock)
		}
	}
	if rd.States[1].Log[0]+rd.States[1].Log[1]+rd.States[1].Log[2] < 100 {
		t.Errorf("shard 1: state %+v, want the charge of 100 in it", rd.States[1])
	}
}
