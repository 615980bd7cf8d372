// Package storetest holds sluice.Store wrappers over a memstore that the
// tests of several packages share: a store whose answers come back a
// round trip after it decided (RoundTrip), and one that holds its callers
// until each has its answer (Gated). Both hide memstore's KeyTaker, so
// every call comes through the methods below.
package storetest

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// RoundTrip is a memstore whose answers take RTT to come back once it has
// decided, as Redis's do. It hides memstore's WithinTaker; WithWithin
// returns it with one.
type RoundTrip struct {
	S *memstore.Store

	mu  sync.Mutex
	rtt time.Duration
}

// NewRoundTrip returns a RoundTrip over a new memstore, its answers at
// once until SetRTT.
func NewRoundTrip() *RoundTrip { return &RoundTrip{S: memstore.New(memstore.Options{})} }

// SetRTT sets how long the answers take to come back from now on.
func (s *RoundTrip) SetRTT(d time.Duration) {
	s.mu.Lock()
	s.rtt = d
	s.mu.Unlock()
}

func (s *RoundTrip) wait() {
	s.mu.Lock()
	rtt := s.rtt
	s.mu.Unlock()
	time.Sleep(rtt)
}

func (s *RoundTrip) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	d, err := s.S.Take(ctx, r)
	s.wait()
	return d, err
}

func (s *RoundTrip) TakeAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	err := s.S.TakeAll(ctx, rs, ds)
	s.wait()
	return err
}

// WithWithin returns s with memstore's sluice.WithinTaker, its answers
// late by the same round trip.
func (s *RoundTrip) WithWithin() sluice.Store { return roundTripWithin{s} }

type roundTripWithin struct{ *RoundTrip }

func (s roundTripWithin) TakeWithin(ctx context.Context, r sluice.Request, within time.Duration) (sluice.Decision, bool, error) {
	d, late, err := s.S.TakeWithin(ctx, r, within)
	s.wait()
	return d, late, err
}

// Gated is a memstore whose armed calls each wait, once answered, until
// all of them have been: callers racing for one key all have their first
// answer before any goes on. It counts what the store admitted at a cost
// above 0 (Counted).
type Gated struct {
	S *memstore.Store

	armed   atomic.Int32
	callers sync.WaitGroup
	mu      sync.Mutex
	counted int
}

// NewGated returns a Gated over a new memstore, no call armed.
func NewGated() *Gated { return &Gated{S: memstore.New(memstore.Options{})} }

// Arm gates the next n calls.
func (g *Gated) Arm(n int) { g.armed.Store(int32(n)); g.callers.Add(n) }

// Counted returns how many requests of a cost above 0 the store admitted.
func (g *Gated) Counted() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.counted
}

func (g *Gated) gate() {
	if g.armed.Add(-1) >= 0 {
		g.callers.Done()
		g.callers.Wait()
	}
}

func (g *Gated) count(r sluice.Request, d sluice.Decision, err error) {
	if err == nil && d.Allowed && r.Cost > 0 {
		g.mu.Lock()
		g.counted++
		g.mu.Unlock()
	}
}

func (g *Gated) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	d, err := g.S.Take(ctx, r)
	g.count(r, d, err)
	g.gate()
	return d, err
}

func (g *Gated) TakeWithin(ctx context.Context, r sluice.Request, within time.Duration) (sluice.Decision, bool, error) {
	d, late, err := g.S.TakeWithin(ctx, r, within)
	g.count(r, d, err)
	g.gate()
	return d, late, err
}

func (g *Gated) TakeAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	return g.S.TakeAll(ctx, rs, ds)
}
