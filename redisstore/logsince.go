package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
)

// logSinceScript is log_since.lua, for a pipeline (ReadCounters), and
// logSinceLua runs it alone.
var (
	logSinceScript = newPipedScript(func() string {
		b, err := luaFS.ReadFile("log_since.lua")
		if err != nil {
			panic(err) // embedded: cannot happen
		}
		return string(b)
	}())
	logSinceLua = rueidis.NewLuaScript(logSinceScript.body)
)

// LoggedSince returns how many units the sliding_window_log key of r
// holds that were logged after the instant after (µs since the epoch, on
// the clock its decisions use: Redis' with Options.RedisTime, else the
// requests') and are still in its window at r.Now (Redis' clock with
// Options.RedisTime), and that instant, now (µs). It counts nothing and
// writes nothing. A negative after counts every unit in the window. A unit
// logged in after's own tick is not counted, nor is one a clock behind
// the key's logged at the key's newest time (the log's time never runs
// back): it never counts a unit logged before after.
//
// A reader that keeps now as the next call's after counts each unit logged
// between its calls once: what a sliding log's Remaining cannot tell, as
// it does not say when each unit leaves the window
// (sluice.Algorithm.RemainingAfter).
func (s *Store) LoggedSince(ctx context.Context, r sluice.Request, after int64) (units, now int64, err error) {
	key, args, err := s.logSinceArgs(&r, after)
	if err != nil {
		return 0, 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	return logSinceReply(&r, logSinceLua.Exec(ctx, s.c, []string{key}, args))
}

// logSinceArgs returns the key and arguments of log_since.lua for r and
// after.
func (s *Store) logSinceArgs(r *sluice.Request, after int64) (key string, args []string, err error) {
	if r.Algorithm != sluice.SlidingWindowLog {
		return "", nil, fmt.Errorf("redisstore: logged since %q: %w: %v keeps no log", r.Key, sluice.ErrUnknownAlgorithm, r.Algorithm)
	}
	us, err := s.nowArg(r.Now)
	if err != nil {
		return "", nil, fmt.Errorf("redisstore: logged since %q: %w", r.Key, err)
	}
	t, err := r.Limit.Ticks()
	if err != nil {
		return "", nil, fmt.Errorf("redisstore: logged since %q: %w", r.Key, err)
	}
	since := ""
	if after >= 0 {
		since = strconv.FormatInt(after, 10)
	}
	return s.KeyOf(r), []string{strconv.FormatInt(t.Period, 10), strconv.FormatInt(t.Tick, 10), us, since}, nil
}

// logSinceReply reads log_since.lua's reply for r: the units and the
// instant they were counted at.
func logSinceReply(r *sluice.Request, res rueidis.RedisResult) (units, now int64, err error) {
	arr, err := res.AsIntSlice()
	if err == nil && len(arr) != 2 {
		err = fmt.Errorf("script returned %d values, want 2", len(arr))
	}
	if err != nil {
		return 0, 0, fmt.Errorf("redisstore: logged since %q: %w: %w", r.Key, sluice.ErrStoreUnavailable, err)
	}
	return arr[0], arr[1], nil
}
