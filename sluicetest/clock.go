package sluicetest

import (
	"sync"
	"time"
)

// Clock is a clock a test moves by hand. Give its Now to a Limiter with
// sluice.WithClock, then Advance it instead of sleeping:
//
//	clk := sluicetest.NewClock(sluicetest.T0)
//	lim, _ := sluice.NewLimiter(store, sluice.TokenBucket, sluice.PerSecond(2), sluice.WithClock(clk.Now))
//	lim.Allow(ctx, "k") // ...
//	clk.Advance(500 * time.Millisecond)
//
// It is safe for concurrent use. (For code that sleeps or uses timers, such
// as Limiter.Wait, run the test in a testing/synctest bubble instead.)
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a Clock showing t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d (backward if d is negative) and
// returns the new time.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	return c.t
}

// Set sets the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}
