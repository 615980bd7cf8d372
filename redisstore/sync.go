package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
)

// The fleet primitives: what package fleet's decorators need from a shared
// store. Sync adds hits that instances decided locally and reads back the
// global state (soft limits); Grant reserves quota and Return gives back
// what was not spent (hard limits). They run fleet.lua, for the algorithms
// whose state is the string "T N M" and that a fleet can share by counting:
// token_bucket, gcra, fixed_window and sliding_window_counter with one
// segment (see Shareable). They use the same keys, and the same state, as
// Take: a key may be decided exactly by one instance and in a fleet mode by
// another.

// Shareable reports whether the fleet primitives support algorithm a under
// limit l. The sliding log (a time per admission) and the multi-segment
// counter keep a hash, not a count, and the leaky bucket hands out places in
// one queue, which cannot be reserved or merged after the fact.
func Shareable(a sluice.Algorithm, l sluice.Limit) bool {
	switch a {
	case sluice.TokenBucket, sluice.GCRA, sluice.FixedWindow:
		return true
	case sluice.SlidingWindowCounter:
		return l.Segments <= 1
	}
	return false
}

// Hit is a request an instance admitted on its own: At in microseconds since
// the Unix epoch, on the clock the instance decided with, and its cost. For
// the windows, Cost is in requests. For token_bucket and GCRA it is the
// debt the request added, in token-ticks (requests × the Limit's Period in
// ticks, see sluice.Limit.Ticks), and a hit may stand for several folded
// into one: it then spans From..At, Cost is the net debt it adds from
// From's debt (its requests' debt less the refill over the span; it may be
// negative), and the debt it leaves at At is at least Floor. From 0 is At.
type Hit struct {
	At, Cost    int64
	From, Floor int64 // token_bucket and GCRA only
}

// SyncOp is one key's part of a Sync batch. Key, Algorithm, Limit and Hits
// are the input; State, Now, Clock and Err the output.
type SyncOp struct {
	Namespace string // as in sluice.Request
	Key       string // limiter key, as in sluice.Request
	Algorithm sluice.Algorithm
	Limit     sluice.Limit
	// Hits are added to the key's state in order, without a check (they
	// were admitted already). Empty reads the state only.
	Hits []Hit
	// State is the key's state after the hits: every instance's count.
	State sluice.State
	// Now is the time (µs) the script measured the expiry from: Redis'
	// clock with Options.RedisTime, else the latest hit's, or this
	// machine's clock for a read.
	Now int64
	// Clock is Redis' clock (µs) when the op ran, with Options.RedisTime;
	// 0 without, the store then running on its callers' clocks. Compared
	// with the caller's clock, it tells how far apart the two are.
	Clock int64
	// Err is this key's failure, if any.
	Err error
	// Writer and Seq make an op's hits count once. With Writer set, Redis
	// adds the hits only if Seq is greater than the last Seq it added for
	// Writer on this key; so an op that failed without a reply (it may
	// have run) can be sent again, with the same Hits and Seq, and its
	// hits count once whether or not the first one ran. A writer (one per
	// process, say) numbers its ops increasing, and sends a key's ops in
	// that order, one at a time. Without Writer the hits are added as
	// they are.
	Writer string
	Seq    uint64
}

// Sync applies each op's hits to its key and reads back the key's state, in
// one pipelined round trip for the whole batch (one per Cluster node). It
// returns an error wrapping sluice.ErrStoreUnavailable if any op failed;
// the ops that did not fail have their output set.
func (s *Store) Sync(ctx context.Context, ops []SyncOp) error {
	if len(ops) == 0 {
		return nil
	}
	wall := time.Now().UnixMicro()
	execs := make([]rueidis.LuaExec, 0, len(ops))
	idx := make([]int, 0, len(ops))
	var errs []error
	for i := range ops {
		op := &ops[i]
		op.Err, op.Clock = nil, 0
		// The key's expiry is measured from the latest hit, on the clock
		// the hits carry (the caller's, as Take's is), not from this
		// machine's: a state that the hits leave at rest an hour after the
		// last of them expires an hour (and the margin) after it, whatever
		// the two clocks' distance. A read (no hits) leaves the key as it is.
		// With RedisTime, from Redis' clock, which the hits are on too
		// (package fleet decides on it), and which the op then reports.
		now := wall
		for i, h := range op.Hits {
			if i == 0 || h.At > now {
				now = h.At
			}
		}
		nowArg := strconv.FormatInt(now, 10)
		if s.opts.RedisTime {
			nowArg = ""
		}
		bucket := op.Algorithm == sluice.TokenBucket || op.Algorithm == sluice.GCRA
		per := 2
		if bucket {
			per = 4
		}
		args, err := s.fleetArgs("sync", op.Algorithm, op.Limit, nowArg, 2+per*len(op.Hits))
		if err != nil {
			op.Err = fmt.Errorf("redisstore: sync %q: %w", op.Key, err)
			errs = append(errs, op.Err)
			continue
		}
		key := s.KeyOf(&sluice.Request{Namespace: op.Namespace, Key: op.Key})
		keys := []string{key}
		if op.Writer != "" && len(op.Hits) > 0 {
			// The writers' last ops, in the key's slot (its hash tag).
			keys = append(keys, key+"|writers")
			args = append(args, op.Writer, strconv.FormatUint(op.Seq, 10))
		} else {
			args = append(args, "", "0")
		}
		for _, h := range op.Hits {
			args = append(args, strconv.FormatInt(h.At, 10), strconv.FormatInt(h.Cost, 10))
			if bucket {
				from := h.From
				if from == 0 {
					from = h.At
				}
				args = append(args, strconv.FormatInt(from, 10), strconv.FormatInt(h.Floor, 10))
			}
		}
		execs = append(execs, rueidis.LuaExec{Keys: keys, Args: args})
		idx = append(idx, i)
	}
	// A batch may be large: allow the timeout per thousand keys.
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout*time.Duration(1+len(execs)/1000))
	defer cancel()
	for j, res := range execFleet(ctx, s.c, execs) {
		op := &ops[idx[j]]
		var raw string
		arr, err := res.ToArray()
		if err == nil && len(arr) != 2 {
			err = fmt.Errorf("script returned %d values, want 2", len(arr))
		}
		if err == nil {
			raw, err = arr[0].ToString()
		}
		if err == nil {
			op.Now, err = arr[1].AsInt64()
		}
		if err == nil {
			op.State, err = parseState(raw)
		}
		if err == nil && s.opts.RedisTime {
			op.Clock = op.Now
		}
		if err != nil {
			op.Err = fmt.Errorf("redisstore: sync %q: %w: %w", op.Key, sluice.ErrStoreUnavailable, err)
			errs = append(errs, op.Err)
		}
	}
	return errors.Join(errs...)
}

// Taken is what SyncTake reads besides the Decision: what a fleet instance
// that has not seen the key yet needs to decide its next requests locally.
type Taken struct {
	// State is the key's state after the decision.
	State sluice.State
	// Clock is Redis' clock (µs) when it decided, with Options.RedisTime;
	// 0 without (the store decided at the request's Now). Compared with
	// the caller's clock, it tells how far apart the two are.
	Clock int64
}

// SyncTake decides r exactly as Take does, in one round trip, and also
// returns the key's state after it and, with Options.RedisTime, Redis'
// clock then.
func (s *Store) SyncTake(ctx context.Context, r sluice.Request) (sluice.Decision, Taken, error) {
	now, err := s.nowArg(r.Now)
	if err != nil {
		return sluice.Decision{}, Taken{}, fmt.Errorf("redisstore: take %q: %w", r.Key, err)
	}
	if r.Cost < 0 {
		return sluice.Decision{}, Taken{}, fmt.Errorf("redisstore: take %q: %w: %d is negative", r.Key, sluice.ErrInvalidCost, r.Cost)
	}
	args, err := s.fleetArgs("take", r.Algorithm, r.Limit, now, 1)
	if err != nil {
		return sluice.Decision{}, Taken{}, fmt.Errorf("redisstore: take %q: %w", r.Key, err)
	}
	args = append(args, luaCost(r.Cost))
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	arr, err := fleetLua.Exec(ctx, s.c, []string{s.KeyOf(&r)}, args).ToArray()
	if err == nil && len(arr) != 3 {
		err = fmt.Errorf("script returned %d values, want 3", len(arr))
	}
	var read, after sluice.State
	var us int64
	if err == nil {
		var raw [2]string
		if raw[0], err = arr[0].ToString(); err == nil {
			if raw[1], err = arr[1].ToString(); err == nil {
				if us, err = arr[2].AsInt64(); err == nil {
					if read, err = parseState(raw[0]); err == nil {
						after, err = parseState(raw[1])
					}
				}
			}
		}
	}
	if err != nil {
		return sluice.Decision{}, Taken{}, fmt.Errorf("redisstore: take %q: %w: %w", r.Key, sluice.ErrStoreUnavailable, err)
	}
	var d sluice.Decision
	if _, err := r.Algorithm.TakeMicro(&d, &read, &r.Limit, us, r.Cost); err != nil {
		return sluice.Decision{}, Taken{}, fmt.Errorf("redisstore: take %q: %w", r.Key, err)
	}
	tk := Taken{State: after}
	if s.opts.RedisTime {
		tk.Clock = us
	}
	return d, tk, nil
}

// fleetArgs checks a request for fleet.lua and returns its first arguments,
// with room for extra more.
func (s *Store) fleetArgs(mode string, a sluice.Algorithm, l sluice.Limit, now string, extra int) ([]string, error) {
	if !Shareable(a, l) {
		return nil, fmt.Errorf("%w: %v%s cannot be shared by a fleet (want token_bucket, gcra, fixed_window or sliding_window_counter with one segment)", sluice.ErrUnknownAlgorithm, a, segs(l))
	}
	if err := a.ValidateLimit(l); err != nil {
		return nil, err // a window's burst other than its rate, as prepare refuses it
	}
	t, err := l.Ticks()
	if err != nil {
		return nil, err
	}
	args := make([]string, 0, 8+extra)
	return append(args, mode, strconv.Itoa(int(a)), strconv.FormatInt(t.Rate, 10), strconv.FormatInt(t.Burst, 10),
		strconv.FormatInt(t.Period, 10), strconv.FormatInt(t.Tick, 10), s.margin, now), nil
}

// fleetScript is fleet.lua, for EVALSHA (piped.go).
var fleetScript = newPipedScript(func() string {
	b, err := luaFS.ReadFile("fleet.lua")
	if err != nil {
		panic(err) // embedded: cannot happen
	}
	return string(b)
}())

// fleetLua runs fleet.lua for one call; a rueidis.Lua serves any client.
var fleetLua = rueidis.NewLuaScript(fleetScript.body)

// execFleet runs fleet.lua once per exec, pipelined (execScripts).
func execFleet(ctx context.Context, c rueidis.Client, execs []rueidis.LuaExec) []rueidis.RedisResult {
	calls := make([]scriptCall, len(execs))
	for i, e := range execs {
		calls[i] = scriptCall{script: &fleetScript, keys: e.Keys, args: e.Args}
	}
	return execScripts(ctx, c, calls)
}

func segs(l sluice.Limit) string {
	if l.Segments > 1 {
		return fmt.Sprintf(" with %d segments", l.Segments)
	}
	return ""
}
