package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// CounterState reads a counter's state as the pure algorithm keeps it:
// after random takes and charges through the store and through the
// algorithm alike, the state read decides as the pure one at the instant
// read and at later ones (its units leaving as the window slides, a
// bucket refilling, a window turning), for a sliding window counter of
// one segment and of several, and for every other algorithm but the log;
// and the read counts nothing. A sliding_window_log is refused.
func TestCounterState(t *testing.T) {
	srv := redistest.StartServer(t)
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(5, 6))
	for li, c := range []struct {
		a sluice.Algorithm
		l sluice.Limit
	}{
		{sluice.SlidingWindowCounter, sluice.PerSecond(20)},
		{sluice.SlidingWindowCounter, sluice.PerSecond(20).WithSegments(4)},
		{sluice.SlidingWindowCounter, sluice.PerMinute(50).WithSegments(6)},
		{sluice.FixedWindow, sluice.PerSecond(20)},
		{sluice.TokenBucket, sluice.PerSecond(20).WithBurst(50)},
		{sluice.GCRA, sluice.PerSecond(20).WithBurst(50)},
		{sluice.LeakyBucket, sluice.PerSecond(20).WithBurst(10)},
	} {
		a, l := c.a, c.l
		for k := range 20 {
			key := fmt.Sprintf("counter-%d-%d", li, k)
			req := func(at time.Time, cost int64, force bool) sluice.Request {
				return sluice.Request{Key: key, Algorithm: a, Limit: l, Cost: cost, Force: force, Now: at}
			}
			var pure sluice.State
			now := sluicetest.T0
			for range rng.IntN(40) {
				now = now.Add(time.Duration(rng.Int64N(int64(l.Period / 5))))
				cost, force := 1+rng.Int64N(5), rng.IntN(10) == 0
				if _, err := s.Take(ctx, req(now, cost, force)); err != nil {
					t.Fatal(err)
				}
				var err error
				if force {
					_, _, err = a.Charge(&pure, l, now, cost)
				} else {
					_, _, err = a.Take(&pure, l, now, cost)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			read := now.Add(time.Duration(rng.Int64N(int64(l.Period))))
			st, clock, err := s.CounterState(ctx, req(read, 0, false))
			if err != nil || clock != read.UnixMicro() {
				t.Fatalf("%v %v: CounterState = %+v, %d, %v; want the clock %d", a, l, st, clock, err, read.UnixMicro())
			}
			for _, dt := range []time.Duration{0, l.Period / 3, l.Period, 2 * l.Period} {
				at := read.Add(dt)
				got, _, _ := a.Take(new(st.Clone()), l, at, 0)
				want, _, _ := a.Take(new(pure.Clone()), l, at, 0)
				if got != want {
					t.Fatalf("%v %v: the state read (%+v) answers %+v %v after the read; the pure one (%+v) %+v", a, l, st, got, dt, pure, want)
				}
			}
			// Nothing read was counted: the store answers as the pure state.
			d, err := s.Take(ctx, req(read, 0, false))
			want, _, _ := a.Take(new(pure.Clone()), l, read, 0)
			if err != nil || d != want {
				t.Fatalf("%v %v: after the read the store answers %+v, %v; want %+v", a, l, d, err, want)
			}
		}
	}
	_, _, err := s.CounterState(ctx, sluice.Request{Key: "x", Algorithm: sluice.SlidingWindowLog, Limit: sluice.PerSecond(20), Now: sluicetest.T0})
	if !errors.Is(err, sluice.ErrUnknownAlgorithm) {
		t.Errorf("a sliding_window_log: err = %v, want ErrUnknownAlgorithm", err)
	}
}
