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
// clients may briefly see that quota as used (with Options.PublishRefunds
// the refund publishes its keys, so that the fleet's over-limit caches
// forget a refusal seen meanwhile). A refund never gives back
// more than the request left in the key: when another client's request
// came in between and found the bucket refilled (the queue leaked) by
// less than it would have been without the take, the buckets and GCRA
// give back that much less (they keep the time of the key's latest
// request for it). With one such request this is exact (to a tick's
// refill); with several, the refund may fall short of it, so the key
// briefly counts a little more than it admitted. No round trip is added.
// Reports alone (every request Force, which no check refuses) are not
// checked: each slot's are taken at once, in one round trip, and should a
// slot fail, the slots that did count are refunded as above.
//
// A report (sluice.Request.Force) runs the general script (the flat Take
// scripts know only Take); in TakeAll it never makes the others fail. A
// refund of a report past its limit gives back cost × spacing, which is
// what it charged unless the debt's cap applied.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
)

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
	// needs are what the ACL probe checks besides the store's own:
	// Options.Needs, or those of the last Require.
	needs atomic.Pointer[[]Need]
	// servers are the versions of the servers as New read them when it
	// connected, then as the last RunIDs read them (the servers in place
	// now), for Require and CheckVersions (see tooOld).
	servers atomic.Pointer[[]serverVersion]
	shardState
}

var (
	_ sluice.Store    = (*Store)(nil)
	_ sluice.Resetter = (*Store)(nil)
)

// New connects to Redis as o says and returns a Store. It fails, wrapping
// sluice.ErrStoreUnavailable, if Redis cannot be reached within the timeout,
// or wrapping ctx's error as well if ctx ends first; either way the
// connections it was making are closed as it returns. It fails with
// ErrAuth or ErrTLS when Redis refuses the connection, and with ErrVersion
// when a server (any Cluster node) is older than the store's scripts need
// (Redis 5.0 with RedisTime, else 4.0) or a feature among o.Needs
// (Need.MinRedis), or than o.Username needs (Redis 6.0; a Sentinel given
// a username, 6.2: see UsernameTooOld).
func New(ctx context.Context, o Options) (*Store, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	if o.TLS != nil && o.TLSFunc != nil {
		if c := o.TLSFunc(); c != nil {
			o.TLS = c
		}
	}
	hs, dials := &handshakes{}, newPending()
	co := rueidis.ClientOption{
		InitAddress:       o.Addrs,
		Username:          o.Username,
		Password:          o.Password,
		SelectDB:          o.DB, // rueidis gives the Sentinels database 0
		TLSConfig:         o.TLS,
		DisableCache:      true,
		ForceSingleClient: !o.Cluster && o.Sentinel == "",
		Dialer:            net.Dialer{Timeout: o.Timeout},
		ConnWriteTimeout:  max(o.Timeout, time.Second),
		// Pipeline concurrent calls; a lone call goes through the solo
		// client below.
		AlwaysPipelining: true,
		MaxFlushDelay:    o.MaxFlushDelay,
		DialCtxFn:        withTLSFunc(dials.dialer(hs), o),
	}
	if o.Sentinel != "" {
		c := o.sentinelCredentials()
		co.Sentinel = rueidis.SentinelOption{MasterSet: o.Sentinel, Username: c.Username, Password: c.Password, TLSConfig: o.TLS,
			Dialer: sentinelDialer(o)}
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
	var (
		r          result
		unanswered string // a TLS handshake begun and not ended
	)
	select {
	case r = <-done:
		dials.settle()
		unanswered = hs.unanswered()
	case <-ctx.Done():
		// Read before the abandon, which ends the handshakes it cuts.
		unanswered = hs.unanswered()
		dials.abandon()
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
		if o.Sentinel != "" && authArityRefused(r.err) {
			// A Sentinel, or the master, too old for its username.
			if err := sentinelRefuses(o); err != nil {
				return nil, err
			}
		}
		if err := usernameRefusal("connect", o, r.err); err != nil {
			return nil, err
		}
		if err := refused(o, r.err); err != nil {
			if o.Sentinel != "" && errors.Is(err, ErrAuth) {
				if re := sentinelRefuses(o); re != nil {
					return nil, re
				}
			}
			return nil, err
		}
		if err := refusedAfterHandshake(o, hs.askedCert(), r.err); err != nil {
			return nil, err
		}
		if err := plainToTLS(ctx, o, r.err); err != nil {
			return nil, err
		}
		if a := unanswered; a != "" {
			return nil, fmt.Errorf("redisstore: connect %v: %w: %w (the TLS handshake with %s got no answer: does Redis serve TLS there?)", o.Addrs, sluice.ErrStoreUnavailable, r.err, a)
		}
		return nil, fmt.Errorf("redisstore: connect %v: %w: %w", o.Addrs, sluice.ErrStoreUnavailable, r.err)
	}
	if o.Sentinel != "" {
		// The client connects though a Sentinel refuses it the failover
		// channels (it would never follow a failover): ask them all.
		if err := sentinelRefuses(o); err != nil {
			r.c.Close()
			return nil, err
		}
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
	needs := o.Needs
	s.needs.Store(&needs)
	servers := serverVersions(ctx, r.c)
	s.servers.Store(&servers)
	if err := tooOld("connect", o.Addrs, servers, append([]Need{o.ownNeed()}, needs...)); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.probe(ctx, "connect"); err != nil {
		s.Close()
		return nil, err
	}
	s.seed = maphash.MakeSeed()
	if o.Cluster {
		s.slotsRead.Store(time.Now().UnixNano())
		_ = s.loadSlots(ctx) // best effort: retried later if it fails (see Masters)
		s.watchSlots()
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

// Close closes the connections to Redis, after ending the Store's reads
// of a Cluster's slot map in the background (and waiting for them).
func (s *Store) Close() {
	s.closeSlots() // before the client: the reads use it
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

// Ping checks that Redis answers within the timeout (for readiness probes),
// that it takes writes (not a replica: a demoted master, before the store
// hears of the failover), and that its ACL still lets the user run the
// store's scripts: a user that lost them (every decision failing NOPERM)
// fails with ErrAuth.
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
		return s.probe(ctx, "ping")
	}
	if err := s.c.Do(ctx, s.c.B().Ping().Build()).Error(); err != nil {
		if ue := usernameRefusal("ping", s.opts, err); ue != nil {
			return ue // reconnected to a server older than the username
		}
		return fmt.Errorf("redisstore: ping: %w: %w", sluice.ErrStoreUnavailable, err)
	}
	if err := s.probe(ctx, "ping"); err != nil {
		return err
	}
	// After the probe, which tells a NOPERM for what it is (ErrAuth).
	if err := s.writable(ctx); err != nil {
		return fmt.Errorf("redisstore: ping: %w: %w", sluice.ErrStoreUnavailable, err)
	}
	return nil
}

// Refunds returns how many cross-slot TakeAll calls had to give back what
// some slots had counted because another slot denied after the check.
func (s *Store) Refunds() uint64 { return s.refunds.Load() }
