package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// Mode is where a Fallback decides.
type Mode int32

const (
	// ModeStore decides on the shared store (Redis): the fleet's limits.
	ModeStore Mode = iota
	// ModeLocal decides in this process' memory at each limit's local
	// share, because the shared store could not decide.
	ModeLocal
)

// String returns "store" or "local".
func (m Mode) String() string {
	if m == ModeLocal {
		return "local"
	}
	return "store"
}

// DefaultProbeInterval is how often a Fallback in local mode asks whether
// the shared store answers again, when FallbackOptions.ProbeInterval is 0.
const DefaultProbeInterval = 500 * time.Millisecond

// FallbackOptions configure a Fallback.
type FallbackOptions struct {
	// ExpectedInstances is how many instances share the store: in local
	// mode each limit's Rate and Burst are divided by it (rounded down, at
	// least 1), so that the fleet as a whole stays near the limit while
	// every instance counts alone. 0 means 1.
	ExpectedInstances int
	// ProbeInterval is how often the store is probed in local mode;
	// 0 means DefaultProbeInterval.
	ProbeInterval time.Duration
	// Probe reports whether the store answers again (nil error). nil means
	// the store's own Ping method if it has one (redisstore's checks every
	// Cluster master), else a Take of cost 0 on a probe key.
	Probe func(context.Context) error
	// ProbeTimeout bounds one probe; 0 means one second.
	ProbeTimeout time.Duration
	// MaxKeys bounds the keys held in memory in local mode; 0 means
	// memstore's default.
	MaxKeys int
	// StartLocal starts in local mode, probing at once: for a process
	// that starts while its store is unreachable.
	StartLocal bool
	// OnModeChange, if set, is called after every change of mode, with the
	// store error that caused a switch to local (nil when back to the
	// store). It must not block.
	OnModeChange func(m Mode, err error)
}

// Fallback is a sluice.Store that decides on a shared store and, while
// that store cannot decide (an error wrapping sluice.ErrStoreUnavailable:
// Redis down, unreachable, timing out), decides in memory at each limit's
// share rate / ExpectedInstances instead of failing. It probes the shared
// store in the background meanwhile and returns to it as soon as a probe
// succeeds.
//
// The switch is per Fallback, not per key: the first request that fails
// moves every request to memory (without waiting on the store's timeout
// again), and the first successful probe moves them all back. On a Redis
// Cluster with one master down, keys on the healthy masters are decided
// locally too, until every master answers.
//
// What the fleet admits in local mode: each instance enforces its share on
// its own counters, started empty (or as the last outage left them), so
// with ExpectedInstances instances up the fleet admits about the limit per
// period, plus up to one share's burst per instance at the switch (the
// shared counts are not known locally). With fewer instances up it admits
// less; with more, more; a share rounded up to 1 admits more than the
// limit when Rate < ExpectedInstances.
//
// Decisions in local mode report the local share's figures (Limit is the
// share's Rate). Errors other than unavailability (an invalid limit or
// cost) and a caller's cancelled context are returned as they are.
//
// A Fallback is safe for concurrent use; Close stops its probe.
type Fallback struct {
	primary  sluice.Store
	local    *memstore.Store
	n        int64
	interval time.Duration
	timeout  time.Duration
	probe    func(context.Context) error
	onChange func(Mode, error)

	// state holds the mode in its low bit (ModeStore 0, ModeLocal 1) and
	// above it the number of the outages (switches to local mode), in
	// one word: a decision that saw local mode reads the outage it was
	// decided in, never the one before. ledger holds the units memory
	// counted per key in the latest outage (see fallback_ledger.go).
	state    atomic.Uint64
	probing  atomic.Bool
	switches atomic.Uint64
	locally  atomic.Uint64
	dropped  atomic.Uint64
	ledger   *ledger

	ctx    context.Context
	cancel context.CancelFunc
	// mu orders a probe's start (wg.Add) before Close's wait, or after
	// closed is set, when none starts: an Add from zero must not race a
	// Wait (sync.WaitGroup).
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

var (
	_ sluice.Store    = (*Fallback)(nil)
	_ sluice.Resetter = (*Fallback)(nil)
)

// NewFallback returns a Fallback over the shared store primary.
func NewFallback(primary sluice.Store, o FallbackOptions) *Fallback {
	maxKeys := o.MaxKeys
	if maxKeys <= 0 {
		maxKeys = memstore.DefaultMaxKeys
	}
	f := &Fallback{
		primary:  primary,
		local:    memstore.New(memstore.Options{MaxKeys: o.MaxKeys}),
		ledger:   newLedger(maxKeys),
		n:        int64(max(1, o.ExpectedInstances)),
		interval: o.ProbeInterval,
		timeout:  o.ProbeTimeout,
		probe:    o.Probe,
		onChange: o.OnModeChange,
	}
	if f.interval <= 0 {
		f.interval = DefaultProbeInterval
	}
	if f.timeout <= 0 {
		f.timeout = time.Second
	}
	if f.probe == nil {
		if p, ok := primary.(interface{ Ping(context.Context) error }); ok {
			f.probe = p.Ping
		} else {
			f.probe = func(ctx context.Context) error {
				_, err := primary.Take(ctx, sluice.Request{Key: "sluice-fallback-probe", Algorithm: sluice.FixedWindow, Limit: sluice.PerSecond(1), Now: time.Now()})
				return err
			}
		}
	}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	if o.StartLocal {
		f.state.Store(1<<1 | uint64(ModeLocal))
		f.startProbe()
	}
	return f
}

// Mode returns where the Fallback decides now.
func (f *Fallback) Mode() Mode { return Mode(f.state.Load() & 1) }

// epoch returns the number of the latest outage (0: none yet).
func (f *Fallback) epoch() uint64 { return f.state.Load() >> 1 }

// Switches returns how many times the Fallback moved to local mode.
func (f *Fallback) Switches() uint64 { return f.switches.Load() }

// LocalDecisions returns how many requests (Take or TakeAll calls) were
// decided in memory.
func (f *Fallback) LocalDecisions() uint64 { return f.locally.Load() }

// RefundsDropped returns how many units given back in local mode were
// dropped: units memory had not counted in the outage, which the shared
// store counted (see Refund).
func (f *Fallback) RefundsDropped() uint64 { return f.dropped.Load() }

// Local returns the memory store of local mode (for its size and
// evictions). Its keys are swept as new ones arrive, that is only in local
// mode: call its Sweep on a timer (the daemon does, every minute) so that
// an outage's keys do not stay once the store is back.
func (f *Fallback) Local() *memstore.Store { return f.local }

// Sweep deletes the memory store's keys at rest at now (memstore's
// Sweep), and the units it noted for refunds that memory has nothing left
// of, and returns how many keys the memory store deleted. Call it on a
// timer (the daemon does, every minute) so that an outage's keys do not
// stay once the store is back.
func (f *Fallback) Sweep(now time.Time) int {
	f.ledger.sweep(now.UnixMicro(), f.epoch())
	return f.local.Sweep(now)
}

// Unwrap returns the shared store.
func (f *Fallback) Unwrap() sluice.Store { return f.primary }

// Close stops the probe and waits for it to end; no probe starts after
// it, so a Fallback that moves to local mode after Close stays there. The
// stores are not closed.
func (f *Fallback) Close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.cancel()
	f.wg.Wait()
}

// LocalLimit returns l's share for one of n instances: Rate and Burst
// divided by n, rounded down but at least 1. The share of a valid limit is
// valid: where the divided rate would stretch the time to refill the
// divided burst past what a Limit may reach (see sluice.Limit; a rate
// rounded down to 1 under a burst far above it, or a period of decades),
// the share keeps its burst and takes the least rate, up to l's own, that
// fits.
func LocalLimit(l sluice.Limit, n int) sluice.Limit {
	if n <= 1 {
		return l
	}
	s := l
	s.Rate = max(1, l.Rate/int64(n))
	if l.Burst > 0 {
		s.Burst = max(1, l.Burst/int64(n))
	}
	if s.Validate() == nil || l.Validate() != nil {
		return s
	}
	// The time to refill, (Burst+1) × Period / Rate, falls as the rate
	// grows, and l's rate fits: with a burst no larger than l's, its
	// refill is no longer than l's.
	s.Burst = s.BurstOrRate()
	s.Rate = leastRate(s, s.Rate, l.Rate) // s.Rate does not fit, l's does
	if s.Burst == s.Rate {
		s.Burst = 0
	}
	return s
}

// localShare is LocalLimit for algorithm a. A window refuses a burst other
// than its rate, so where LocalLimit keeps the divided burst under a rate
// raised to fit, a window's share is instead the least rate, up to l's
// own, that fits with a burst of its rate (a window admits the same
// whatever the burst: only the limit's horizon depends on it).
func localShare(a sluice.Algorithm, l sluice.Limit, n int) sluice.Limit {
	s := LocalLimit(l, n)
	if !a.Valid() || a.TakesBurst() || s.Burst == 0 || s.Burst == s.Rate || a.ValidateLimit(l) != nil {
		return s // l refused (a burst of its own, say): the store says why
	}
	// Below LocalLimit's rate nothing fits (a larger burst only lengthens
	// the refill); l's own rate does.
	s.Burst = 0
	s.Rate = leastRate(s, s.Rate-1, l.Rate)
	return s
}

// leastRate returns the least rate in (lo, hi] at which s is a valid
// limit, hi being one: the time s's limit reaches ahead falls as its rate
// grows (see sluice.Limit), so a binary search finds it.
func leastRate(s sluice.Limit, lo, hi int64) int64 {
	for hi-lo > 1 {
		s.Rate = lo + (hi-lo)/2
		if s.Validate() == nil {
			hi = s.Rate
		} else {
			lo = s.Rate
		}
	}
	return hi
}

// Take decides r on the shared store, or in memory while it cannot.
func (f *Fallback) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	if f.Mode() == ModeStore {
		d, err := f.primary.Take(ctx, r)
		if err == nil || !f.failed(ctx, err) {
			return d, err
		}
	}
	f.locally.Add(1)
	r.Limit = localShare(r.Algorithm, r.Limit, int(f.n))
	d, err := f.local.Take(ctx, r)
	if err == nil {
		f.counted(&r, &d)
	}
	return d, err
}

// TakeAll decides rs on the shared store, or in memory while it cannot.
func (f *Fallback) TakeAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	if f.Mode() == ModeStore {
		err := f.primary.TakeAll(ctx, rs, ds)
		if err == nil || !f.failed(ctx, err) {
			return err
		}
	}
	f.locally.Add(1)
	local := rs
	if f.n > 1 {
		var buf [4]sluice.Request
		local = append(buf[:0], rs...)
		for i := range local {
			local[i].Limit = localShare(local[i].Algorithm, local[i].Limit, int(f.n))
		}
	}
	if err := f.local.TakeAll(ctx, local, ds); err != nil {
		return err
	}
	// Counted all or none: none when a request that is not a report was
	// refused.
	for i := range ds {
		if !ds[i].Allowed && !local[i].Force {
			return nil
		}
	}
	for i := range local {
		f.counted(&local[i], &ds[i])
	}
	return nil
}

// Reset resets r's key in memory and in the shared store
// (sluice.Resetter); if the shared store cannot reset keys, the error
// wraps errors.ErrUnsupported (the key is reset in memory all the same).
func (f *Fallback) Reset(ctx context.Context, r sluice.Request) error {
	local := r
	local.Limit = localShare(r.Algorithm, r.Limit, int(f.n))
	if err := f.local.Reset(ctx, local); err != nil {
		return err
	}
	f.ledger.forget(keyOf(&r))
	rs, ok := f.primary.(sluice.Resetter)
	if !ok {
		return fmt.Errorf("fleet: reset %q: the store behind the fallback (%T): %w", r.Key, f.primary, errors.ErrUnsupported)
	}
	return rs.Reset(ctx, r)
}

// failed reports whether err means the store is unavailable, and if so
// switches to local mode.
func (f *Fallback) failed(ctx context.Context, err error) bool {
	if ctx.Err() != nil || !isUnavailable(err) {
		return false
	}
	for {
		st := f.state.Load()
		if Mode(st&1) == ModeLocal {
			return true
		}
		// A new outage: its counts in memory are noted under its number.
		if f.state.CompareAndSwap(st, (st>>1+1)<<1|uint64(ModeLocal)) {
			break
		}
	}
	f.switches.Add(1)
	if f.onChange != nil {
		f.onChange(ModeLocal, err)
	}
	f.startProbe()
	return true
}

// startProbe runs one probe loop unless one is running or the Fallback is
// closed: every interval it probes the store, and on the first success
// switches back and ends.
func (f *Fallback) startProbe() {
	if !f.probing.CompareAndSwap(false, true) {
		return
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		f.probing.Store(false)
		return
	}
	f.wg.Add(1)
	f.mu.Unlock()
	go func() {
		defer f.wg.Done()
		t := time.NewTicker(f.interval)
		defer t.Stop()
		for {
			select {
			case <-f.ctx.Done():
				f.probing.Store(false)
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(f.ctx, f.timeout)
			err := f.probe(ctx)
			cancel()
			if err == nil {
				// Done probing before switching back: a failure right after
				// the switch must be able to start the next probe.
				f.probing.Store(false)
				f.state.And(^uint64(ModeLocal)) // the outage's number stays
				if f.onChange != nil {
					f.onChange(ModeStore, nil)
				}
				return
			}
		}
	}()
}
