// Package redisstore is a sluice.Store kept in Redis or Redis Cluster, so
// that a fleet of Sluice instances (and of services using the library)
// shares one count per key.
//
// Every algorithm runs as the Lua twin of its Go state machine in the root
// package, atomically inside Redis, in one round trip per decision (EVALSHA,
// reloaded transparently on NOSCRIPT). For the same sequence of (time, key,
// cost) it decides exactly what memstore decides.
//
// # Keys
//
// A limiter key k in namespace ns (sluice.Request.Namespace, which a
// sluice.Limiter sets to its name, algorithm and limit) is kept in one Redis
// key named Prefix + ns + "{" + k + "}", such as
// sluice:api|token_bucket,100/m|{203.0.113.7}: a
// string "T N M" (the fields of sluice.State) for the buckets, GCRA, the
// fixed window and the one-segment counter; a hash for the sliding log and
// the multi-segment counter. The braces are a Cluster hash tag, so
// everything a script touches for one key sits in one slot, and the keys of
// several limiters for one client key (a TakeAll of per-IP limits) share a
// slot too. Redis ends a tag at the first "}", so inside the
// tag k is escaped (a backslash is written as two, "}" as a backslash and
// ")"), so a client whose key contains "}" cannot choose the slot: Sluice
// alone decides where a key lives. Keys without "}" or a backslash are
// written as they are (a namespace with braces or backslashes is escaped
// the same way, "{" as a backslash and "("). Prefix must not contain braces.
// Keys expire (relative PX/PEXPIRE) a
// margin after the instant their state is at rest, measured on the clock the
// decision used, so a store fed old or future times (the simulator, skewed
// clocks) does not lose state by accident.
//
// # Clock
//
// By default a decision uses Request.Now, the caller's clock, as memstore
// does: that is what tests and `sluice simulate` need. With Options.RedisTime
// the scripts read Redis' own clock (TIME) instead and Request.Now is
// ignored, so a fleet's decisions do not depend on how far apart its
// machines' clocks are; the daemon uses Redis time by default.
//
// # Failures
//
// Every call is bounded by Options.Timeout (default 50ms) on top of the
// caller's context. Any failure (Redis down, hung, timed out, an error
// reply) is returned wrapping sluice.ErrStoreUnavailable; the caller decides
// whether to allow or deny. The client reconnects by itself when Redis is
// back.
//
// # Several limits, one decision
//
// TakeAll on a single node (or when every key hashes to one Cluster slot) is
// one script over all the keys: it decides every request, then commits all
// of them or none. Across Cluster slots no script can see every key, so
// TakeAll first checks each slot's requests without counting (in parallel);
// if any is denied nothing is counted. Otherwise it takes each slot's
// requests (all or none per slot, in parallel); should a slot now deny
// (another client got there in between), the slots that did count are
// refunded: each algorithm gives back what the request took (tokens, a
// window's count, log entries, a queue slot), exactly so when nothing else
// touched the key in between. Between the take and the refund, other
// clients may briefly see that quota as used.
//
// A report (sluice.Request.Force) runs the general script (the flat Take
// scripts know only Take); in TakeAll it never makes the others fail. A
// refund of a report past its limit gives back cost × spacing, which is
// what it charged unless the debt's cap applied.
package redisstore

import (
	"context"
	"crypto/tls"
	"embed"
	"errors"
	"fmt"
	"hash/maphash"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
)

// Options configure a Store. The zero value of each field is a sensible
// default except Addrs, which is required.
type Options struct {
	// Addrs are the Redis addresses (host:port): one for a single node, one
	// or more seed nodes with Cluster, the sentinels with Sentinel.
	Addrs []string
	// Cluster selects Redis Cluster: the client discovers the slots from
	// the seed Addrs and routes each key to its node.
	Cluster bool
	// Sentinel, if set, is the name of the master set monitored by the
	// Redis Sentinels at Addrs; the store follows failovers.
	Sentinel string
	// Username and Password authenticate (AUTH; Username for Redis ACLs).
	Username, Password string
	// TLS, if set, connects with TLS.
	TLS *tls.Config
	// Timeout bounds every call to Redis, connecting included; default 50ms.
	Timeout time.Duration
	// RedisTime makes decisions use Redis' clock (TIME, inside the script)
	// instead of Request.Now.
	RedisTime bool
	// Prefix starts every Redis key; default "sluice:". No braces.
	Prefix string
	// ExpiryMargin is how long a key is kept after its state is at rest,
	// to cover clock skew between callers; default 10s.
	ExpiryMargin time.Duration
	// MaxFlushDelay lets the client's writer pause up to this long after
	// each write to Redis, so that the calls other goroutines make
	// meanwhile leave in one write: fewer system calls, so less CPU per
	// decision in this process and in Redis under concurrent load, for at
	// most this much added latency. 0 (the default) writes at once.
	MaxFlushDelay time.Duration
	// AlwaysPipeline sends every call of a single-node store through the
	// pipelining client, even a call made while no other is in flight
	// (which otherwise goes through the solo client, see New): the store
	// as it was before, for benchmarks that compare the two.
	AlwaysPipeline bool
}

// Defaults.
const (
	DefaultTimeout      = 50 * time.Millisecond
	DefaultPrefix       = "sluice:"
	DefaultExpiryMargin = 10 * time.Second
)

// withDefaults returns o with zero fields defaulted.
func (o Options) withDefaults() Options {
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.ExpiryMargin == 0 {
		o.ExpiryMargin = DefaultExpiryMargin
	}
	return o
}

// Validate reports whether o can be used.
func (o Options) Validate() error {
	var errs []error
	if len(o.Addrs) == 0 {
		errs = append(errs, errors.New("redisstore: options: addrs: at least one address is required"))
	}
	for _, a := range o.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			errs = append(errs, fmt.Errorf("redisstore: options: addrs: %q: %v", a, err))
		}
	}
	if o.Cluster && o.Sentinel != "" {
		errs = append(errs, errors.New("redisstore: options: cluster and sentinel are exclusive"))
	}
	if o.Timeout < 0 {
		errs = append(errs, fmt.Errorf("redisstore: options: timeout %v must not be negative", o.Timeout))
	}
	if o.ExpiryMargin < 0 {
		errs = append(errs, fmt.Errorf("redisstore: options: expiry margin %v must not be negative", o.ExpiryMargin))
	}
	if o.MaxFlushDelay < 0 || o.MaxFlushDelay > time.Millisecond {
		errs = append(errs, fmt.Errorf("redisstore: options: max flush delay %v must be between 0 and 1ms", o.MaxFlushDelay))
	}
	if strings.ContainsAny(o.Prefix, "{}") {
		errs = append(errs, fmt.Errorf("redisstore: options: prefix %q must not contain braces (they would change the Cluster hash tag)", o.Prefix))
	}
	return errors.Join(errs...)
}

// Store is a sluice.Store in Redis. It is safe for concurrent use. Build
// one with New: the zero Store has no connection, and using it panics.
type Store struct {
	c         rueidis.Client
	solo      rueidis.Client // single node: for a call with nothing else in flight; nil otherwise
	flying    atomic.Int64   // Take and TakeAll calls in flight
	opts      Options
	margin    string                        // ms
	useTime   string                        // "1" to use Redis TIME
	take      [sluice.GCRA + 1]*rueidis.Lua // one.lua: every algorithm, any limit
	flat      [sluice.GCRA + 1]*rueidis.Lua // take_*.lua: string state only; nil for the log
	all       *rueidis.Lua
	refunds   atomic.Uint64
	deadlines *deadlines // bounds Take and TakeAll by opts.Timeout
	// flatBatch runs several concurrent flat Takes in one call (single
	// node only; nil on a Cluster); batchers gather them (flatbatch.go).
	flatBatch [sluice.GCRA + 1]*rueidis.Lua
	batchers  [sluice.GCRA + 1]flatBatcher
	shardState
}

var (
	_ sluice.Store    = (*Store)(nil)
	_ sluice.Resetter = (*Store)(nil)
)

// New connects to Redis as o says and returns a Store. It fails, wrapping
// sluice.ErrStoreUnavailable, if Redis cannot be reached within the timeout.
func New(ctx context.Context, o Options) (*Store, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	co := rueidis.ClientOption{
		InitAddress:       o.Addrs,
		Username:          o.Username,
		Password:          o.Password,
		TLSConfig:         o.TLS,
		DisableCache:      true,
		ForceSingleClient: !o.Cluster && o.Sentinel == "",
		Dialer:            net.Dialer{Timeout: o.Timeout},
		ConnWriteTimeout:  max(o.Timeout, time.Second),
		// Pipeline concurrent calls; a lone call goes through the solo
		// client below.
		AlwaysPipelining: true,
		MaxFlushDelay:    o.MaxFlushDelay,
	}
	if o.Sentinel != "" {
		co.Sentinel = rueidis.SentinelOption{MasterSet: o.Sentinel, Username: o.Username, Password: o.Password, TLSConfig: o.TLS}
	}
	type result struct {
		c, solo rueidis.Client
		err     error
	}
	// NewClient dials; bound it by the caller's context and the timeout.
	done := make(chan result, 1)
	go func() {
		c, err := rueidis.NewClient(co)
		var solo rueidis.Client
		if err == nil && co.ForceSingleClient && !o.AlwaysPipeline {
			// A lone call (nothing else in flight) goes through a client
			// that writes and reads on the caller's goroutine: the
			// pipelining client, once it has seen concurrency, hands
			// every call to its writer and reader goroutines, which cost
			// a lone caller ~10 µs of wake-ups here.
			so := co
			so.AlwaysPipelining, so.DisableAutoPipelining = false, true
			if solo, err = rueidis.NewClient(so); err != nil {
				c.Close()
				c = nil
			}
		}
		done <- result{c, solo, err}
	}()
	ctx, cancel := context.WithTimeout(ctx, max(o.Timeout, time.Second))
	defer cancel()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		go func() {
			if r := <-done; r.c != nil {
				r.c.Close()
				if r.solo != nil {
					r.solo.Close()
				}
			}
		}()
		r.err = ctx.Err()
	}
	if r.err != nil {
		return nil, fmt.Errorf("redisstore: connect %v: %w: %w", o.Addrs, sluice.ErrStoreUnavailable, r.err)
	}
	s := &Store{
		c:         r.c,
		solo:      r.solo,
		opts:      o,
		margin:    strconv.FormatInt(o.ExpiryMargin.Milliseconds(), 10),
		useTime:   "0",
		all:       rueidis.NewLuaScript(scriptAll),
		deadlines: newDeadlines(o.Timeout),
	}
	if o.RedisTime {
		s.useTime = "1"
	}
	s.seed = maphash.MakeSeed()
	if o.Cluster {
		_ = s.loadSlots(ctx) // best effort: see shard.go
	}
	for _, a := range sluice.Algorithms() {
		s.take[a] = rueidis.NewLuaScript(scripts[a])
		if flatScripts[a] != "" {
			s.flat[a] = rueidis.NewLuaScript(flatScripts[a])
			if !o.Cluster {
				s.flatBatch[a] = rueidis.NewLuaScript(flatBatchScript(flatScripts[a]))
			}
		}
	}
	return s, nil
}

// Close closes the connections to Redis.
func (s *Store) Close() {
	s.c.Close()
	if s.solo != nil {
		s.solo.Close()
	}
}

// client returns the client for a decision and the function to call when
// it is done: the synchronous one when nothing else is in flight (a lone
// caller gets its answer without goroutine hand-offs), else the pipelining
// one (concurrent callers share writes and reads).
func (s *Store) client() (rueidis.Client, func()) {
	if s.solo == nil {
		return s.c, func() {}
	}
	if s.flying.Add(1) == 1 {
		return s.solo, s.landed
	}
	return s.c, s.landed
}

func (s *Store) landed() { s.flying.Add(-1) }

// Ping checks that Redis answers within the timeout (for readiness probes).
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	if s.opts.Cluster {
		// Every master must answer and serve its slots, or some keys
		// cannot be decided: a restarted master answers PING before the
		// cluster is ok again.
		for addr, n := range s.c.Nodes() {
			info, err := n.Do(ctx, n.B().ClusterInfo().Build()).ToString()
			if err != nil {
				return fmt.Errorf("redisstore: ping %s: %w: %w", addr, sluice.ErrStoreUnavailable, err)
			}
			if !strings.Contains(info, "cluster_state:ok") {
				return fmt.Errorf("redisstore: ping %s: %w: cluster state not ok", addr, sluice.ErrStoreUnavailable)
			}
		}
		return nil
	}
	if err := s.c.Do(ctx, s.c.B().Ping().Build()).Error(); err != nil {
		return fmt.Errorf("redisstore: ping: %w: %w", sluice.ErrStoreUnavailable, err)
	}
	return nil
}

// Refunds returns how many cross-slot TakeAll calls had to give back what
// some slots had counted because another slot denied after the check.
func (s *Store) Refunds() uint64 { return s.refunds.Load() }

// Key returns the Redis key that holds the state of limiter key k:
// Prefix + "{" + k + "}", where a backslash in k is written as two and a
// "}" as a backslash and ")", so that the whole of k is the Cluster hash tag.
func (s *Store) Key(k string) string {
	if strings.ContainsAny(k, `}\`) {
		k = tagEscaper.Replace(k)
	}
	return s.opts.Prefix + "{" + k + "}"
}

// tagEscaper escapes a limiter key for a hash tag, injectively: a
// backslash starts every escape, and no escape contains "}".
var tagEscaper = strings.NewReplacer(`\`, `\\`, "}", `\)`)

// KeyOf returns the Redis key that holds the state of r.Namespace+r.Key:
// Prefix + Namespace + "{" + Key + "}", escaped as Key escapes.
func (s *Store) KeyOf(r *sluice.Request) string {
	if r.Namespace == "" {
		return s.Key(r.Key)
	}
	ns := r.Namespace
	if strings.ContainsAny(ns, `{}\`) {
		ns = nsEscaper.Replace(ns)
	}
	k := r.Key
	if strings.ContainsAny(k, `}\`) {
		k = tagEscaper.Replace(k)
	}
	return s.opts.Prefix + ns + "{" + k + "}"
}

// nsEscaper escapes a namespace, injectively and without braces.
var nsEscaper = strings.NewReplacer(`\`, `\\`, "}", `\)`, "{", `\(`)

// Reset deletes the Redis key of r (sluice.Resetter): its next request
// finds it new. A failure wraps sluice.ErrStoreUnavailable.
func (s *Store) Reset(ctx context.Context, r sluice.Request) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	if err := s.c.Do(ctx, s.c.B().Del().Key(s.KeyOf(&r)).Build()).Error(); err != nil {
		return fmt.Errorf("redisstore: reset %q: %w: %w", r.Key, sluice.ErrStoreUnavailable, err)
	}
	return nil
}

// request is a sluice.Request checked and converted to script arguments.
type request struct {
	key   string // Redis key
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
	if r.Cost < 0 {
		return fmt.Errorf("%w: %d is negative", sluice.ErrInvalidCost, r.Cost)
	}
	q.key = s.KeyOf(r)
	q.ticks = t
	q.args = [9]string{
		strconv.Itoa(int(r.Algorithm)),
		strconv.FormatInt(t.Rate, 10),
		strconv.FormatInt(t.Burst, 10),
		strconv.FormatInt(t.Period, 10),
		strconv.FormatInt(t.Segments, 10),
		strconv.FormatInt(t.Tick, 10),
		strconv.FormatInt(r.Cost, 10),
		strconv.FormatInt(r.Now.UnixMicro(), 10),
		"0", // mark: 1 forces the charge (main.lua)
	}
	if r.Force {
		q.args[8] = "1"
	}
	return nil
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
	if r.Algorithm.Valid() && s.flat[r.Algorithm] != nil && !r.Algorithm.UsesLog(r.Limit) && r.Cost >= 0 && !r.Force {
		if t, err := r.Limit.Ticks(); err == nil {
			return s.takeFlat(ctx, &r, t)
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
func (s *Store) takeFlat(ctx context.Context, r *sluice.Request, t sluice.Ticks) (sluice.Decision, error) {
	us := r.Now.UnixMicro()
	args := make([]string, 3, 9)
	if !s.opts.RedisTime {
		args[0] = strconv.FormatInt(us, 10)
	}
	args[1] = strconv.FormatInt(t.Tick, 10)
	args[2] = s.margin
	cost := r.Cost
	switch r.Algorithm {
	case sluice.TokenBucket, sluice.GCRA:
		room, cp := int64(-1), int64(0)
		if cost <= t.Burst {
			cp = cost * t.Period
			room = t.Burst*t.Period - cp
		}
		args = append(args, strconv.FormatInt(t.Rate, 10), strconv.FormatInt(room, 10), strconv.FormatInt(cp, 10))
	case sluice.FixedWindow, sluice.SlidingWindowCounter:
		room, c := int64(-1), int64(0)
		if cost <= t.Rate {
			room, c = t.Rate-cost, cost
		}
		args = append(args, strconv.FormatInt(t.Period, 10), strconv.FormatInt(room, 10), strconv.FormatInt(c, 10))
	case sluice.LeakyBucket:
		full := (t.Burst + 1) * t.Period
		cp := int64(-1)
		if cost > 0 && cost <= t.Burst+1 {
			cp = cost * t.Period
		}
		args = append(args, strconv.FormatInt(t.Rate, 10), strconv.FormatInt(t.Period, 10), strconv.FormatInt(t.Burst*t.Period, 10),
			strconv.FormatInt(full, 10), strconv.FormatInt(-floorDiv(-full, t.Rate)+1, 10), strconv.FormatInt(cp, 10))
	}
	key := s.KeyOf(r)
	var raw string
	var err error
	if s.flatBatch[r.Algorithm] != nil {
		raw, us, err = s.takeBatched(ctx, r.Algorithm, key, args, us)
	} else {
		raw, us, err = s.flatOne(ctx, r.Algorithm, key, args, us)
	}
	var st sluice.State
	if err == nil {
		st, err = parseState(raw)
	}
	if err != nil {
		return sluice.Decision{}, fmt.Errorf("redisstore: take %q: %w: %w", r.Key, sluice.ErrStoreUnavailable, err)
	}
	var d sluice.Decision
	if _, err := r.Algorithm.TakeMicro(&d, &st, &r.Limit, us, cost); err != nil {
		return sluice.Decision{}, fmt.Errorf("redisstore: take %q: %w", r.Key, err)
	}
	return d, nil
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
	vals, err := script.Exec(ctx, c, keys, args).AsIntSlice()
	done()
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

// TakeAll decides several requests as one: all are counted if every one is
// allowed, none otherwise. See the package documentation for how this is
// done across Cluster slots.
func (s *Store) TakeAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	if len(ds) != len(rs) {
		return fmt.Errorf("redisstore: take all: %d decisions for %d requests", len(ds), len(rs))
	}
	if len(rs) == 0 {
		return nil
	}
	qs := make([]request, len(rs))
	for i := range rs {
		if err := s.prepare(&rs[i], &qs[i]); err != nil {
			return fmt.Errorf("redisstore: take all %q: %w", rs[i].Key, err)
		}
	}
	ctx = s.deadlines.bound(ctx)
	groups := [][]int{make([]int, len(rs))}
	for i := range groups[0] {
		groups[0][i] = i
	}
	if s.opts.Cluster {
		groups = bySlot(qs)
	}
	if len(groups) == 1 {
		rps, err := s.run(ctx, "take", qs, groups[0], nil)
		if err != nil {
			return s.allErr(rs, err)
		}
		for j, i := range groups[0] {
			ds[i] = qs[i].decision(rps[j])
		}
		return nil
	}
	// Across slots: check everything without counting first.
	rps, err := s.runGroups(ctx, "check", qs, groups, nil)
	if err != nil {
		return s.allErr(rs, err)
	}
	allowed := true
	for gi, g := range groups {
		for j, i := range g {
			ds[i] = qs[i].decision(rps[gi][j])
			allowed = allowed && (rps[gi][j].allowed || rs[i].Force)
		}
	}
	if !allowed {
		return nil
	}
	// Then take each slot's share; refund if some slot changed its mind.
	rps, err = s.runGroups(ctx, "take", qs, groups, nil)
	committed := make([]bool, len(groups))
	denied := err != nil
	for gi, g := range groups {
		if rps[gi] == nil {
			continue
		}
		committed[gi] = true
		for j, i := range g {
			ds[i] = qs[i].decision(rps[gi][j])
			if !rps[gi][j].allowed && !rs[i].Force {
				committed[gi] = false
				denied = true
			}
		}
	}
	if !denied {
		return nil
	}
	var refund [][]int
	var marks [][]reply
	for gi, g := range groups {
		if committed[gi] {
			refund = append(refund, g)
			marks = append(marks, rps[gi])
		}
	}
	if len(refund) > 0 {
		s.refunds.Add(1)
		// The refund must happen even if the caller's context is done.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.Timeout)
		defer rcancel()
		if _, rerr := s.runGroups(rctx, "refund", qs, refund, marks); rerr != nil && err == nil {
			err = fmt.Errorf("refund: %w", rerr)
		}
	}
	if err != nil {
		return s.allErr(rs, err)
	}
	return nil
}

func (s *Store) allErr(rs []sluice.Request, err error) error {
	keys := make([]string, len(rs))
	for i := range rs {
		keys[i] = rs[i].Key
	}
	return fmt.Errorf("redisstore: take all %q: %w: %w", keys, sluice.ErrStoreUnavailable, err)
}

// run executes the all-algorithms script over the requests qs[g...].
func (s *Store) run(ctx context.Context, mode string, qs []request, g []int, marks []reply) ([]reply, error) {
	keys := make([]string, len(g))
	args := make([]string, 0, 3+9*len(g))
	args = append(args, mode, s.useTime, s.margin)
	for j, i := range g {
		keys[j] = qs[i].key
		a := qs[i].args
		if marks != nil {
			a[8] = strconv.FormatInt(marks[j].mark, 10)
		}
		args = append(args, a[:]...)
	}
	n := len(g)
	if mode == "refund" {
		n = 0
	}
	return s.exec(ctx, s.all, keys, args, n)
}

// runGroups runs one script per group, in parallel. A group whose script
// failed has a nil reply; the first error is returned.
func (s *Store) runGroups(ctx context.Context, mode string, qs []request, groups [][]int, marks [][]reply) ([][]reply, error) {
	out := make([][]reply, len(groups))
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for gi, g := range groups {
		var m []reply
		if marks != nil {
			m = marks[gi]
		}
		wg.Go(func() { out[gi], errs[gi] = s.run(ctx, mode, qs, g, m) })
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// bySlot groups request indexes by Cluster slot, in order of first use.
func bySlot(qs []request) [][]int {
	var groups [][]int
	at := map[uint16]int{}
	for i := range qs {
		sl := slot(qs[i].key)
		gi, ok := at[sl]
		if !ok {
			gi = len(groups)
			at[sl] = gi
			groups = append(groups, nil)
		}
		groups[gi] = append(groups[gi], i)
	}
	return groups
}

// slot is Redis Cluster's HASH_SLOT of key: CRC16 (XMODEM) of the hash tag,
// if the key has a non-empty one, else of the whole key, mod 16384.
func slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc & 16383
}

//go:embed *.lua
var luaFS embed.FS

// scripts[a] is the general Take script of algorithm a (one.lua; for the
// sliding log, log_take.lua, which keeps one.lua's arguments and reply);
// flatScripts[a] the flat one (take_head.lua) for the algorithms with a
// string state ("" for the sliding log); scriptAll holds every algorithm,
// for TakeAll.
var (
	scripts     [sluice.GCRA + 1]string
	flatScripts [sluice.GCRA + 1]string
	scriptAll   string
)

var algFiles = [...]string{
	sluice.TokenBucket:          "token_bucket.lua",
	sluice.LeakyBucket:          "leaky_bucket.lua",
	sluice.FixedWindow:          "fixed_window.lua",
	sluice.SlidingWindowLog:     "sliding_window_log.lua",
	sluice.SlidingWindowCounter: "sliding_window_counter.lua",
	sluice.GCRA:                 "gcra.lua",
}

func init() {
	read := func(name string) string {
		b, err := luaFS.ReadFile(name)
		if err != nil {
			panic(err) // embedded: cannot happen
		}
		return string(b)
	}
	prelude, fields, debt := read("prelude.lua"), read("fields.lua"), read("debt.lua")
	all := []string{prelude, fields, debt}
	for _, a := range sluice.Algorithms() {
		parts := []string{prelude}
		switch a {
		case sluice.TokenBucket, sluice.GCRA:
			parts = append(parts, debt)
		case sluice.SlidingWindowLog, sluice.SlidingWindowCounter:
			parts = append(parts, fields)
		}
		parts = append(parts, read(algFiles[a]), read("one.lua"))
		scripts[a] = strings.Join(parts, "\n")
		if a == sluice.SlidingWindowLog {
			// Take's own flat script, on the same hash (log_take.lua).
			scripts[a] = read("log_take.lua")
		}
		all = append(all, read(algFiles[a]))
		if a != sluice.SlidingWindowLog {
			flatScripts[a] = strings.Join([]string{read("take_head.lua"), read("take_" + algFiles[a]), read("take_tail.lua")}, "\n")
		}
	}
	scriptAll = strings.Join(append(all, read("refund.lua"), read("main.lua")), "\n")
}

// Script returns the Lua source that Take runs for algorithm a (as sent to
// EVALSHA), for benchmarks and inspection: for the sliding window counter,
// the one with Segments 1; "" for an invalid algorithm. See take_head.lua
// for its arguments.
func Script(a sluice.Algorithm) string {
	if !a.Valid() {
		return ""
	}
	if flatScripts[a] != "" {
		return flatScripts[a]
	}
	return scripts[a]
}
