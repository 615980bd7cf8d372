package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
)

// counterStateScript is counter_state.lua, for a pipeline (ReadCounters), and
// counterStateLua runs it alone.
var (
	counterStateScript = newPipedScript(func() string {
		b, err := luaFS.ReadFile("counter_state.lua")
		if err != nil {
			panic(err) // embedded: cannot happen
		}
		return string(b)
	}())
	counterStateLua = rueidis.NewLuaScript(counterStateScript.body)
)

// CounterState returns the state of the key of r, as r.Algorithm keeps it
// (a sliding_window_counter of any number of segments, and every other
// algorithm but sliding_window_log, which keeps a log: see LoggedSince),
// and the instant it was read at, now (µs since the epoch: r.Now, or
// Redis' clock with Options.RedisTime). It counts nothing and writes
// nothing. With sluice.Algorithm.TakeMicro on a copy at now, the state
// tells what the key answers then; with sluice.Algorithm.RemainingAt at a
// later instant, what it would answer had it taken nothing since: what a
// bucket refills, a window regains as it turns or its units leave, which
// its Decision tells only against the time between (on Redis' clock,
// which the caller's is not).
func (s *Store) CounterState(ctx context.Context, r sluice.Request) (st sluice.State, now int64, err error) {
	key, args, segs, err := s.counterStateArgs(&r)
	if err != nil {
		return st, 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	return counterStateReply(&r, segs, counterStateLua.Exec(ctx, s.c, []string{key}, args))
}

// counterStateArgs returns the key and arguments of counter_state.lua for
// r, and r's number of segments.
func (s *Store) counterStateArgs(r *sluice.Request) (key string, args []string, segs int64, err error) {
	if !r.Algorithm.Valid() || r.Algorithm == sluice.SlidingWindowLog {
		return "", nil, 0, fmt.Errorf("redisstore: counter state %q: %w: %v keeps no counter state (sliding_window_log keeps a log: read it with LoggedSince)", r.Key, sluice.ErrUnknownAlgorithm, r.Algorithm)
	}
	us, err := s.nowArg(r.Now)
	if err != nil {
		return "", nil, 0, fmt.Errorf("redisstore: counter state %q: %w", r.Key, err)
	}
	t, err := r.Limit.Ticks()
	if err != nil {
		return "", nil, 0, fmt.Errorf("redisstore: counter state %q: %w", r.Key, err)
	}
	segs = 1 // every algorithm's state but a segmented counter's is "T N M"
	if r.Algorithm == sluice.SlidingWindowCounter {
		segs = max(t.Segments, 1)
	}
	return s.KeyOf(r), []string{strconv.FormatInt(segs, 10), us}, segs, nil
}

// counterStateReply reads counter_state.lua's reply for r, of segs
// segments: the state and the instant it was read at.
func counterStateReply(r *sluice.Request, segs int64, res rueidis.RedisResult) (st sluice.State, now int64, err error) {
	arr, err := res.AsIntSlice()
	want := 4
	if segs > 1 {
		want = int(segs) + 3
	}
	if err == nil && len(arr) != want {
		err = fmt.Errorf("script returned %d values, want %d", len(arr), want)
	}
	if err != nil {
		return st, 0, fmt.Errorf("redisstore: counter state %q: %w: %w", r.Key, sluice.ErrStoreUnavailable, err)
	}
	st.T = arr[1]
	if segs == 1 {
		st.N, st.M = arr[2], arr[3]
	} else if arr[1] != 0 || nonZero(arr[2:]) {
		st.Log = arr[2:]
	}
	return st, arr[0], nil
}

func nonZero(xs []int64) bool {
	for _, x := range xs {
		if x != 0 {
			return true
		}
	}
	return false
}
