package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

func TestLocalLimit(t *testing.T) {
	for _, tc := range []struct {
		l    sluice.Limit
		n    int
		want sluice.Limit
	}{
		{sluice.PerMinute(6), 3, sluice.PerMinute(2)},
		{sluice.PerMinute(7), 3, sluice.PerMinute(2)},
		{sluice.PerMinute(2), 3, sluice.PerMinute(1)},
		{sluice.PerSecond(10).WithBurst(30), 4, sluice.PerSecond(2).WithBurst(7)},
		{sluice.PerMinute(10).WithSegments(4), 2, sluice.PerMinute(5).WithSegments(4)},
		{sluice.PerMinute(10), 1, sluice.PerMinute(10)},
		{sluice.PerMinute(10), 0, sluice.PerMinute(10)},
	} {
		if got := fleet.LocalLimit(tc.l, tc.n); got != tc.want {
			t.Errorf("LocalLimit(%+v, %d) = %+v, want %+v", tc.l, tc.n, got, tc.want)
		}
	}
}

// modes records a Fallback's mode changes on a channel.
func modes() (chan fleet.Mode, func(fleet.Mode, error)) {
	ch := make(chan fleet.Mode, 16)
	return ch, func(m fleet.Mode, _ error) {
		select {
		case ch <- m:
		default:
		}
	}
}

func wantMode(t *testing.T, ch chan fleet.Mode, want fleet.Mode) {
	t.Helper()
	if got := <-ch; got != want {
		t.Fatalf("mode changed to %v, want %v", got, want)
	}
}

func take(t *testing.T, s sluice.Store, key string, l sluice.Limit) sluice.Decision {
	t.Helper()
	d, err := s.Take(context.Background(), sluice.Request{Key: key, Algorithm: sluice.FixedWindow, Limit: l, Cost: 1, Now: outageNow})
	if err != nil {
		t.Fatalf("Take(%s): %v", key, err)
	}
	return d
}

// outageNow is the instant of take's decisions, in Redis (the outage tests
// pass it: no RedisTime) and in memory alike: an hour's start. On the
// clock, an hour ending during a test (seconds, with a Cluster's master
// stopped and restarted) started the fixed windows over under its exact
// counts.
var outageNow = time.Now().Truncate(time.Hour)

// admitted takes n times and returns how many were allowed.
func admitted(t *testing.T, s sluice.Store, key string, l sluice.Limit, n int) int {
	t.Helper()
	a := 0
	for range n {
		if take(t, s, key, l).Allowed {
			a++
		}
	}
	return a
}

// upTimeout is the store timeout of the outage tests. They count exact
// decisions while Redis is up, so no call may time out then: on a 2-core
// machine shared with other builds, under -race, a call can take hundreds
// of milliseconds. While a server is stopped calls fail at once
// (connection refused), whatever the timeout.
const upTimeout = 2 * time.Second

// TestFallbackRedisOutage stops and restarts a real redis-server: decisions
// go on in memory at the local share while it is down, and return to Redis
// once it answers.
func TestFallbackRedisOutage(t *testing.T) {
	srv := redistest.StartServer(t)
	rs := fleet.OpenRedis(t, redisstore.Options{Addrs: []string{srv.Addr}, Timeout: upTimeout})
	ch, onChange := modes()
	f := fleet.NewFallback(rs, fleet.FallbackOptions{ExpectedInstances: 3, ProbeInterval: 10 * time.Millisecond, OnModeChange: onChange})
	t.Cleanup(f.Close)
	l := sluice.PerHour(6)

	if n := admitted(t, f, "a", l, 8); n != 6 || f.Mode() != fleet.ModeStore {
		t.Fatalf("Redis up: %d of 8 admitted in mode %v, want 6 in store mode", n, f.Mode())
	}
	srv.Stop()
	if n := admitted(t, f, "b", l, 4); n != 2 {
		t.Fatalf("Redis down: %d of 4 admitted, want the local share 6/3 = 2", n)
	}
	wantMode(t, ch, fleet.ModeLocal)
	if f.Switches() != 1 || f.LocalDecisions() != 4 {
		t.Fatalf("Switches = %d, LocalDecisions = %d; want 1 and 4", f.Switches(), f.LocalDecisions())
	}
	srv.Restart()
	wantMode(t, ch, fleet.ModeStore)
	// Redis came back empty: key b has its whole limit there.
	if n := admitted(t, f, "b", l, 8); n != 6 {
		t.Fatalf("Redis back: %d of 8 admitted, want 6", n)
	}
	if got, err := redistest.Do(srv.Addr, "EXISTS", rs.Key("b")); err != nil || got != "1" {
		t.Fatalf("EXISTS %s = %q, %v: the decisions did not go to Redis", rs.Key("b"), got, err)
	}
	if f.LocalDecisions() != 4 {
		t.Fatalf("LocalDecisions = %d after Redis came back, want still 4", f.LocalDecisions())
	}
}

// TestFallbackCacheOutage stacks the two decorators as the daemon does:
// the cache keeps refusing a key Redis refused, the fallback decides the
// rest while Redis is down, and the cache learns nothing from local mode.
func TestFallbackCacheOutage(t *testing.T) {
	srv := redistest.StartServer(t)
	rs := fleet.OpenRedis(t, redisstore.Options{Addrs: []string{srv.Addr}, Timeout: upTimeout})
	c := fleet.NewOverLimitCache(rs, fleet.OverLimitOptions{})
	ch, onChange := modes()
	f := fleet.NewFallback(c, fleet.FallbackOptions{ExpectedInstances: 2, Probe: rs.Ping, ProbeInterval: 10 * time.Millisecond, OnModeChange: onChange})
	t.Cleanup(f.Close)
	l := sluice.PerHour(4)
	if n := admitted(t, f, "a", l, 6); n != 4 || c.Hits() != 1 {
		t.Fatalf("Redis up: %d admitted, %d cache hits; want 4 and 1", n, c.Hits())
	}
	srv.Stop()
	if n := admitted(t, f, "b", l, 3); n != 2 {
		t.Fatalf("Redis down: %d of 3 admitted, want the local share 2", n)
	}
	wantMode(t, ch, fleet.ModeLocal)
	if c.Len() != 0 {
		t.Fatalf("the cache holds %d refusals after Redis failed, want 0", c.Len())
	}
	srv.Restart()
	wantMode(t, ch, fleet.ModeStore)
	if n := admitted(t, f, "b", l, 6); n != 4 {
		t.Fatalf("Redis back: %d of 6 admitted for b, want 4 (nothing learnt from local mode)", n)
	}
}

// TestFallbackCluster stops one master of a real 3-node Cluster: the
// Fallback decides locally until the master is back.
func TestFallbackCluster(t *testing.T) {
	t.Parallel() // a Cluster (or Redis) and stores of its own
	cl := redistest.StartCluster(t)
	rs := fleet.OpenRedis(t, redisstore.Options{Addrs: cl.Addrs, Cluster: true, Timeout: upTimeout})
	ch, onChange := modes()
	f := fleet.NewFallback(rs, fleet.FallbackOptions{ExpectedInstances: 2, ProbeInterval: 20 * time.Millisecond, OnModeChange: onChange})
	t.Cleanup(f.Close)
	l := sluice.PerHour(10)
	for i := range 30 { // keys on every master
		if n := admitted(t, f, fmt.Sprint("k", i), l, 1); n != 1 {
			t.Fatalf("key %d refused with the cluster up", i)
		}
	}
	cl.Nodes[1].Stop()
	for i := range 30 {
		if n := admitted(t, f, fmt.Sprint("down", i), l, 6); n != 5 {
			t.Fatalf("node down, key %d: %d of 6 admitted, want the local share 5", i, n)
		}
	}
	wantMode(t, ch, fleet.ModeLocal)
	cl.Nodes[1].Restart()
	wantMode(t, ch, fleet.ModeStore)
	for i := range 30 {
		if n := admitted(t, f, fmt.Sprint("down", i), l, 12); n != 10 {
			t.Fatalf("node back, key %d: %d of 12 admitted, want the cluster's 10", i, n)
		}
	}
}

// flaky is a store that is unavailable while down is set.
type flaky struct {
	down  atomic.Bool
	calls atomic.Int64
}

var errDown = fmt.Errorf("flaky: %w", sluice.ErrStoreUnavailable)

func (s *flaky) Take(context.Context, sluice.Request) (sluice.Decision, error) {
	s.calls.Add(1)
	if s.down.Load() {
		return sluice.Decision{}, errDown
	}
	return sluice.Decision{Allowed: true, Limit: 1000}, nil
}

func (s *flaky) TakeAll(_ context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	s.calls.Add(1)
	if s.down.Load() {
		return errDown
	}
	for i := range ds {
		ds[i] = sluice.Decision{Allowed: true, Limit: 1000}
	}
	return nil
}

// TestFallbackProbeTimer checks the probe's timing in a synctest bubble:
// one probe per interval while the store is down, none once it is back,
// and a new loop after the next failure.
func TestFallbackProbeTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &flaky{}
		var probes atomic.Int64
		probe := func(context.Context) error {
			probes.Add(1)
			if s.down.Load() {
				return errDown
			}
			return nil
		}
		f := fleet.NewFallback(s, fleet.FallbackOptions{ProbeInterval: time.Second, Probe: probe, StartLocal: true})
		defer f.Close()
		s.down.Store(true)
		ctx := context.Background()
		r := sluice.Request{Key: "k", Algorithm: sluice.TokenBucket, Limit: sluice.PerSecond(5), Cost: 1, Now: time.Now()}
		if d, err := f.Take(ctx, r); err != nil || d.Limit != 5 || s.calls.Load() != 0 {
			t.Fatalf("StartLocal: Take = %+v, %v with %d store calls; want a local decision", d, err, s.calls.Load())
		}
		time.Sleep(3500 * time.Millisecond)
		synctest.Wait()
		if p := probes.Load(); p != 3 || f.Mode() != fleet.ModeLocal {
			t.Fatalf("after 3.5 intervals down: %d probes, mode %v; want 3, local", p, f.Mode())
		}
		s.down.Store(false)
		time.Sleep(time.Second)
		synctest.Wait()
		if f.Mode() != fleet.ModeStore {
			t.Fatalf("after a successful probe: mode %v", f.Mode())
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if p := probes.Load(); p != 4 {
			t.Fatalf("%d probes, want no more than 4 once the store is back", p)
		}
		if d, err := f.Take(ctx, r); err != nil || d.Limit != 1000 {
			t.Fatalf("back on the store: Take = %+v, %v", d, err)
		}
		s.down.Store(true)
		if d, err := f.Take(ctx, r); err != nil || d.Limit != 5 || f.Mode() != fleet.ModeLocal {
			t.Fatalf("store down again: Take = %+v, %v, mode %v; want a local decision", d, err, f.Mode())
		}
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		if p := probes.Load(); p != 5 {
			t.Fatalf("%d probes, want a new probe loop after the second failure", p)
		}
	})
}

// TestFallbackKeepsOtherErrors: an invalid request and a cancelled caller
// are errors of their own, not a reason to leave the store.
func TestFallbackKeepsOtherErrors(t *testing.T) {
	srv := redistest.StartServer(t)
	f := fleet.NewFallback(fleet.OpenRedis(t, redisstore.Options{Addrs: []string{srv.Addr}}), fleet.FallbackOptions{})
	t.Cleanup(f.Close)
	_, err := f.Take(context.Background(), sluice.Request{Key: "k", Algorithm: sluice.TokenBucket, Limit: sluice.PerSecond(1), Cost: -1, Now: time.Now()})
	if !errors.Is(err, sluice.ErrInvalidCost) {
		t.Fatalf("cost -1: err = %v, want ErrInvalidCost", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := f.Take(ctx, sluice.Request{Key: "k", Algorithm: sluice.TokenBucket, Limit: sluice.PerSecond(1), Cost: 1, Now: time.Now()}); err == nil {
		t.Fatal("cancelled context: no error")
	}
	if f.Mode() != fleet.ModeStore || f.Switches() != 0 {
		t.Fatalf("mode %v after %d switches, want store and none", f.Mode(), f.Switches())
	}
}

// TestFallbackConformance runs the whole suite through a Fallback: over a
// healthy store it decides as the store does; in local mode (a store that
// never answers a probe) with one expected instance, as memory does, the
// limits whole.
func TestFallbackConformance(t *testing.T) {
	t.Run("Store", func(t *testing.T) {
		srv := redistest.StartServer(t)
		f := fleet.NewFallback(fleet.OpenRedis(t, redisstore.Options{Addrs: []string{srv.Addr}}), fleet.FallbackOptions{})
		t.Cleanup(f.Close)
		sluicetest.Run(t, func(*testing.T) sluice.Store { return f })
		if f.Mode() != fleet.ModeStore || f.Switches() != 0 {
			t.Errorf("mode %v after %d switches, want store and none", f.Mode(), f.Switches())
		}
	})
	t.Run("Local", func(t *testing.T) {
		down := errors.New("down")
		f := fleet.NewFallback(memstore.New(memstore.Options{}), fleet.FallbackOptions{StartLocal: true,
			Probe: func(context.Context) error { return fmt.Errorf("%w: %w", sluice.ErrStoreUnavailable, down) }})
		t.Cleanup(f.Close)
		sluicetest.Run(t, func(*testing.T) sluice.Store { return f })
		if f.Mode() != fleet.ModeLocal {
			t.Errorf("mode %v, want local", f.Mode())
		}
	})
}
