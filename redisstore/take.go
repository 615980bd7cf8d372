package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
)

// request is a sluice.Request checked and converted to script arguments.
type request struct {
	key   string // Redis key
	ns    string // the request's Namespace and Key, for refundMessage
	name  string
	ticks sluice.Ticks
	args  [9]string
}

func (s *Store) prepare(r *sluice.Request, q *request) error {
	if !r.Algorithm.Valid() {
		return fmt.Errorf("%w: %d", sluice.ErrUnknownAlgorithm, uint8(r.Algorithm))
	}
	t, err := r.Limit.Ticks()
	if err != nil {
		return err
	}
	if err := r.Algorithm.ValidateLimit(r.Limit); err != nil {
		return err // the log's bound, as memory refuses it
	}
	if r.Cost < 0 {
		return fmt.Errorf("%w: %d is negative", sluice.ErrInvalidCost, r.Cost)
	}
	if !s.opts.RedisTime {
		// Past MinTime … MaxTime the scripts' doubles are not exact.
		if err := sluice.CheckTime(r.Now); err != nil {
			return err
		}
	}
	q.key = s.KeyOf(r)
	q.ns, q.name = r.Namespace, r.Key
	q.ticks = t
	q.args = [9]string{
		strconv.Itoa(int(r.Algorithm)),
		strconv.FormatInt(t.Rate, 10),
		strconv.FormatInt(t.Burst, 10),
		strconv.FormatInt(t.Period, 10),
		strconv.FormatInt(t.Segments, 10),
		strconv.FormatInt(t.Tick, 10),
		luaCost(r.Cost),
		strconv.FormatInt(r.Now.UnixMicro(), 10),
		"0", // mark: 1 forces the charge (main.lua)
	}
	if r.Force {
		q.args[8] = "1"
	}
	return nil
}

// luaCost is the script argument of cost c ≥ 0. A cost above 2^53 is not a
// double exactly: 2^53 + 1 would be read as 2^53, which a leaky bucket of
// Burst 2^53 - 1 admits. Every such cost is above every capacity (Limit.Ticks
// keeps Burst+1 and Rate+1 within 2^53) and decides the same, so it is sent
// as 2^53 + 2, a double exactly.
func luaCost(c int64) string {
	if c > 1<<53 {
		return "9007199254740994"
	}
	return strconv.FormatInt(c, 10)
}

// nowArg is the script argument of a decision's time t: "" with Redis'
// clock (t is not read), else t in µs, which must lie within MinTime …
// MaxTime (past them the scripts' doubles are not exact).
func (s *Store) nowArg(t time.Time) (string, error) {
	if s.opts.RedisTime {
		return "", nil
	}
	if err := sluice.CheckTime(t); err != nil {
		return "", err
	}
	return strconv.FormatInt(t.UnixMicro(), 10), nil
}

// reply is one request's answer from a script, in ticks.
type reply struct {
	allowed                                    bool
	remaining, retry, reset, delay, idle, mark int64
}

func (q *request) decision(rp reply) sluice.Decision {
	dur := func(ticks int64) time.Duration {
		if ticks < 0 {
			return sluice.Never
		}
		return time.Duration(ticks*q.ticks.Tick) * time.Microsecond
	}
	d := sluice.Decision{
		Allowed:    rp.allowed,
		Limit:      q.ticks.Rate,
		Remaining:  rp.remaining,
		RetryAfter: dur(rp.retry),
		ResetAfter: dur(rp.reset),
		Delay:      dur(rp.delay),
	}
	if rp.allowed {
		d.RetryAfter = 0
	}
	return d
}

// Take decides one request in one round trip and counts it if allowed.
func (s *Store) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	if r.Algorithm.Valid() && s.flat[r.Algorithm] != nil && !r.Algorithm.UsesLog(r.Limit) && r.Cost >= 0 && !r.Force && (s.opts.RedisTime || sluice.CheckTime(r.Now) == nil) {
		// A window's burst other than its rate is refused by prepare.
		if t, err := r.Limit.Ticks(); err == nil && (t.Burst == t.Rate || r.Algorithm.TakesBurst()) {
			d, _, err := s.takeFlat(ctx, &r, t, noWithin)
			return d, err
		}
	}
	var q request
	if err := s.prepare(&r, &q); err != nil {
		return sluice.Decision{}, fmt.Errorf("redisstore: take %q: %w", r.Key, err)
	}
	ctx = s.deadlines.bound(ctx)
	var rps []reply
	var err error
	if r.Force {
		// A report is rare: the general script, whose take mode commits a
		// forced charge (the flat and log scripts know only Take).
		rps, err = s.run(ctx, "take", []request{q}, []int{0}, nil)
	} else {
		args := make([]string, 0, 12)
		args = append(args, "one", s.useTime, s.margin)
		args = append(args, q.args[:]...)
		rps, err = s.exec(ctx, s.take[r.Algorithm], []string{q.key}, args, 1)
	}
	if err != nil {
		return sluice.Decision{}, fmt.Errorf("redisstore: take %q: %w: %w", r.Key, sluice.ErrStoreUnavailable, err)
	}
	return q.decision(rps[0]), nil
}

// takeFlat is Take for the algorithms whose state is the string "T N M":
// the flat script (take_head.lua) moves the key's state and returns the
// state it read; the Decision is TakeMicro's on that state, at the time the
// script used, so it is exactly what the state machine decided inside Redis.
//
// within bounds a leaky bucket request's Delay, in ticks (TakeWithin):
// the script then queues it only if it leaves within that many, and a
// request admitted with a longer Delay is late, uncounted. noWithin is
// none.
func (s *Store) takeFlat(ctx context.Context, r *sluice.Request, t sluice.Ticks, within int64) (sluice.Decision, bool, error) {
	us := r.Now.UnixMicro()
	c := getFlatCall()
	defer putFlatCall(c)
	// The numbers are written into one string, each argument a substring
	// of it: one allocation for all of them.
	var nb numArgs
	if !s.opts.RedisTime {
		nb.add(us)
	} else {
		nb.skip()
	}
	nb.add(t.Tick)
	nb.skip() // the margin: s.margin
	cost := r.Cost
	switch r.Algorithm {
	case sluice.TokenBucket, sluice.GCRA:
		room, cp := int64(-1), int64(0)
		if cost <= t.Burst {
			cp = cost * t.Period
			room = t.Burst*t.Period - cp
		}
		nb.add(t.Rate, room, cp)
	case sluice.FixedWindow, sluice.SlidingWindowCounter:
		room, n := int64(-1), int64(0)
		if cost <= t.Rate {
			room, n = t.Rate-cost, cost
		}
		nb.add(t.Period, room, n)
	case sluice.LeakyBucket:
		full := (t.Burst + 1) * t.Period
		cp := int64(-1)
		if cost > 0 && cost <= t.Burst+1 {
			cp = cost * t.Period
		}
		maxWait := t.Burst * t.Period
		if within < -floorDiv(-maxWait, t.Rate) {
			// Admitted only if its last unit leaves within that many
			// ticks: within × Rate parts (-1: none).
			maxWait = max(within, -1) * t.Rate
		}
		nb.add(t.Rate, t.Period, maxWait, full, -floorDiv(-full, t.Rate)+1, cp)
	}
	c.args = nb.strings(c.argv[:0])
	c.args[2] = s.margin
	c.key = s.KeyOf(r)
	c.us = us
	if s.flatBatch[r.Algorithm] != nil {
		s.takeBatched(ctx, r.Algorithm, c)
	} else {
		c.raw, c.us, c.err = s.flatOne(ctx, r.Algorithm, c.key, c.args, us)
	}
	raw, us, err := c.raw, c.us, c.err
	var st sluice.State
	if err == nil {
		st, err = parseState(raw)
	}
	if err != nil {
		return sluice.Decision{}, false, fmt.Errorf("redisstore: take %q: %w: %w", r.Key, sluice.ErrStoreUnavailable, err)
	}
	var d sluice.Decision
	var read sluice.State
	if within != noWithin {
		read = st
	}
	if _, err := r.Algorithm.TakeMicro(&d, &st, &r.Limit, us, cost); err != nil {
		return sluice.Decision{}, false, fmt.Errorf("redisstore: take %q: %w", r.Key, err)
	}
	if within != noWithin && d.Allowed && d.Delay > time.Duration(max(within, -1)*t.Tick)*time.Microsecond {
		// Late: the script queued nothing. Decided again at cost 0, on
		// the state read, for what the key has left without it.
		delay := d.Delay
		if _, err := r.Algorithm.TakeMicro(&d, &read, &r.Limit, us, 0); err != nil {
			return sluice.Decision{}, false, fmt.Errorf("redisstore: take %q: %w", r.Key, err)
		}
		d.Allowed, d.RetryAfter, d.Delay = false, delay, 0
		return d, true, nil
	}
	return d, false, nil
}

// clockReply reads a flat script's reply with Redis' clock: the state read
// ("" for none) and the time used (µs).
func clockReply(res rueidis.RedisResult) (string, int64, error) {
	arr, err := res.ToArray()
	if err != nil {
		return "", 0, err
	}
	if len(arr) != 2 {
		return "", 0, fmt.Errorf("script returned %d values, want 2", len(arr))
	}
	raw, err := arr[0].ToString()
	if err != nil {
		return "", 0, err
	}
	us, err := arr[1].AsInt64()
	return raw, us, err
}

// parseState parses a key's string state "T N M"; "" is the zero State.
func parseState(raw string) (sluice.State, error) {
	var st sluice.State
	if raw == "" {
		return st, nil
	}
	t, rest, ok1 := strings.Cut(raw, " ")
	n, m, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 {
		return st, fmt.Errorf("state %q: want \"T N M\"", raw)
	}
	var err [3]error
	st.T, err[0] = strconv.ParseInt(t, 10, 64)
	st.N, err[1] = strconv.ParseInt(n, 10, 64)
	st.M, err[2] = strconv.ParseInt(m, 10, 64)
	if err[0] != nil || err[1] != nil || err[2] != nil {
		return sluice.State{}, fmt.Errorf("state %q: %w", raw, errors.Join(err[:]...))
	}
	return st, nil
}

// numArgs writes up to 9 script arguments, numbers, into one buffer.
type numArgs struct {
	b    []byte
	buf  [160]byte
	ends [9]int // ends[i]: the end of argument i in b; skipped ones are empty
	n    int
}

func (a *numArgs) add(vs ...int64) {
	if a.b == nil {
		a.b = a.buf[:0]
	}
	for _, v := range vs {
		a.b = strconv.AppendInt(a.b, v, 10)
		a.ends[a.n] = len(a.b)
		a.n++
	}
}

// skip leaves argument n empty (the caller sets it).
func (a *numArgs) skip() {
	a.ends[a.n] = len(a.b)
	a.n++
}

// strings appends the arguments to dst: substrings of one string.
func (a *numArgs) strings(dst []string) []string {
	all := string(a.b)
	start := 0
	for _, end := range a.ends[:a.n] {
		dst = append(dst, all[start:end])
		start = end
	}
	return dst
}

// floorDiv is floor division (b > 0).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

func (s *Store) exec(ctx context.Context, script *rueidis.Lua, keys, args []string, n int) ([]reply, error) {
	c, done := s.client()
	res := script.Exec(ctx, c, keys, args)
	done()
	return replies(res, n)
}

// replies reads the n replies of a call of the all-algorithms script.
func replies(res rueidis.RedisResult, n int) ([]reply, error) {
	vals, err := res.AsIntSlice()
	if err != nil {
		return nil, err
	}
	if len(vals) != 7*n {
		return nil, fmt.Errorf("script returned %d values, want %d", len(vals), 7*n)
	}
	rps := make([]reply, n)
	for i := range rps {
		v := vals[7*i:]
		rps[i] = reply{allowed: v[0] == 1, remaining: v[1], retry: v[2], reset: v[3], delay: v[4], idle: v[5], mark: v[6]}
	}
	return rps, nil
}
