package config

import (
	"time"

	"github.com/sluicehq/sluice/internal/deferq"
)

// DeferConfig tunes the queue behind the rules whose action is defer: how
// deferred requests are replayed, retried and handed over when an instance
// dies. It applies only when some rule defers (which needs the Redis store).
type DeferConfig struct {
	// ClaimIdle is how long a deferred request held by a silent instance
	// (killed, partitioned) waits before another instance takes it over.
	// Default deferq.DefaultClaimIdle (30s).
	ClaimIdle time.Duration `yaml:"claim_idle"`
	// DeliveryTimeout bounds one replay to the upstream, until its
	// response headers. It must stay under half of ClaimIdle, so that a
	// live instance records the outcome before anyone may take the
	// request over. Default the smaller of deferq.DefaultDeliveryTimeout
	// (10s) and a third of ClaimIdle.
	DeliveryTimeout time.Duration `yaml:"delivery_timeout"`
	// MaxAttempts bounds the sends of one request before it goes to the
	// dead-letter stream. Default deferq.DefaultMaxAttempts (10: with the
	// default back-off, the last comes 243 s after the first failed one,
	// so a request outlives an upstream down for about 4 minutes).
	MaxAttempts int `yaml:"max_attempts"`
	// Backoff is the wait after the first failed attempt, doubling at each
	// failure up to MaxBackoff. Defaults deferq.DefaultBackoff (1s) and
	// deferq.DefaultMaxBackoff (1m).
	Backoff    time.Duration `yaml:"backoff"`
	MaxBackoff time.Duration `yaml:"max_backoff"`
	// Concurrency bounds the replays in flight per rule and instance.
	// Default deferq.DefaultConcurrency (16).
	Concurrency int `yaml:"concurrency"`
	// StatusTTL is how long GET /v1/deferred/ID can read an outcome after
	// it is recorded. Default deferq.DefaultStatusTTL (24h).
	StatusTTL time.Duration `yaml:"status_ttl"`
}

func (c *DeferConfig) defaults() {
	setDefault(&c.ClaimIdle, deferq.DefaultClaimIdle)
	setDefault(&c.DeliveryTimeout, min(deferq.DefaultDeliveryTimeout, c.ClaimIdle/3))
	setDefault(&c.MaxAttempts, deferq.DefaultMaxAttempts)
	setDefault(&c.Backoff, deferq.DefaultBackoff)
	setDefault(&c.MaxBackoff, max(deferq.DefaultMaxBackoff, c.Backoff))
	setDefault(&c.Concurrency, deferq.DefaultConcurrency)
	setDefault(&c.StatusTTL, deferq.DefaultStatusTTL)
}

func (c *DeferConfig) check(ck *checker) {
	ck.between("defer.claim_idle", c.ClaimIdle, 100*time.Millisecond, time.Hour)
	if c.DeliveryTimeout <= 0 || c.DeliveryTimeout >= c.ClaimIdle/2 {
		ck.fail("defer.delivery_timeout", "%v must be above 0 and under half of defer.claim_idle (%v), so that a live instance records each outcome before another may take the request over", c.DeliveryTimeout, c.ClaimIdle)
	}
	if n := c.MaxAttempts; n < 1 || n > 100 {
		ck.fail("defer.max_attempts", "%d must be between 1 and 100", n)
	}
	ck.between("defer.backoff", c.Backoff, time.Millisecond, time.Hour)
	if c.MaxBackoff < c.Backoff || c.MaxBackoff > 24*time.Hour {
		ck.fail("defer.max_backoff", "%v must be between defer.backoff (%v) and 24h", c.MaxBackoff, c.Backoff)
	}
	if n := c.Concurrency; n < 1 || n > 10_000 {
		ck.fail("defer.concurrency", "%d must be between 1 and 10000", n)
	}
	ck.between("defer.status_ttl", c.StatusTTL, time.Minute, 30*24*time.Hour)
}

// Options returns the queue settings as deferq takes them.
func (c *DeferConfig) Options() deferq.Options {
	return deferq.Options{
		ClaimIdle:       c.ClaimIdle,
		DeliveryTimeout: c.DeliveryTimeout,
		MaxAttempts:     c.MaxAttempts,
		Backoff:         c.Backoff,
		MaxBackoff:      c.MaxBackoff,
		Concurrency:     c.Concurrency,
		StatusTTL:       c.StatusTTL,
	}
}
