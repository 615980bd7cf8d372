package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// hotPair is two daemons on a 3-node Cluster with the given rules (lines
// of the config's rules list), not Run: the tests of shards: auto's moves
// refresh the hot sets themselves, at their own now (the daemons' Now),
// while decisions are on Redis's clock. Its rules count in days since the
// epoch: the pair is made clear of midnight UTC.
type hotPair struct {
	t    testing.TB
	ctx  context.Context
	t0   time.Time
	now  atomic.Pointer[time.Time]
	a, b *Daemon
	s    *redisstore.Store
	// addrs are the Cluster's nodes, for the tests that ask them directly.
	addrs []string
}

func newHotPair(t testing.TB, rules string) *hotPair {
	t.Helper()
	return newHotPairOn(t, rules, false)
}

// newHotPairOn is newHotPair whose decisions are, with requestClock, on
// the daemons' clock (Options.requestClock): p.now, which the test sets
// (setNow) for each step, rather than Redis's, which it cannot move.
// Either way a refresh's exchanges with the fleet and its seeds and
// settles get a minute, and each call to Redis 10 s, where a daemon gives
// them a second, half of one and 2 s: a move that fails leaves its key
// unmoved or unseeded, which the tests would read as the product's
// fault, and a loaded machine (2 cores, other tests' Clusters beside)
// pauses a process for longer than those.
func newHotPairOn(t testing.TB, rules string, requestClock bool) *hotPair {
	t.Helper()
	timeout, slow := 10*time.Second, time.Minute
	c := redistest.StartCluster(t)
	redistest.ClearOfWindowEdge(t, 24*time.Hour, 5*time.Minute)
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	yaml := fmt.Sprintf(`
listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], cluster: true, timeout: %v}
rules:
%s`, strings.Join(c.Addrs, ", "), timeout, rules)
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	p := &hotPair{t: t, ctx: context.Background(), t0: time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC), addrs: c.Addrs}
	p.now.Store(&p.t0)
	open := func() *Daemon {
		d, err := New(cfg, Options{ConfigPath: path, Now: func() time.Time { return *p.now.Load() }, requestClock: requestClock, seedTimeout: slow, shareTimeout: slow})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		// New connects in the background when its first try is slow (a
		// loaded machine), and reads the slot map again if it must.
		waitFor(t, "the store connected to 3 masters", func() bool {
			s := d.lazy.s.Load()
			return s != nil && s.Masters() == 3
		})
		return d
	}
	p.a, p.b = open(), open()
	p.s = p.a.lazy.s.Load()
	return p
}

// setNow sets the daemons' clock: the instant of the decisions that follow
// with newHotPairOn's requestClock.
func (p *hotPair) setNow(t time.Time) { p.now.Store(&t) }

// refresh refreshes d's hot sets at at, after traffic seen elsewhere
// (requests of cost 2, decided or not) of each key of keys (by rule) when
// hot.
func (p *hotPair) refresh(d *Daemon, at time.Time, hot bool, keys map[string]string) {
	p.t.Helper()
	p.now.Store(&at)
	if hot {
		for rule, key := range keys {
			for range 8000 {
				d.hot.Rule(rule).Observe(key, 2, at)
			}
		}
	}
	d.refreshHot(at)
}

// pastHorizon takes each rule of keys (its name → its key) cold for the
// fleet: Redis's clock moved a minute past the key's time in the rule's
// set, and the key's own counter at rest (reset). It returns when that
// is, on a's clock: the latest of those instants, t0 at the earliest.
func (p *hotPair) pastHorizon(keys map[string]string) time.Time {
	p.t.Helper()
	later := p.t0
	for name, key := range keys {
		ttl := (*p.a.hotAuto.Load())[name]
		p.advance(name, ttl+time.Minute)
		later = later.Add(max(0, p.t0.Add(ttl+time.Minute).Sub(later)))
		r := p.a.engine().Rules().Rule(name)
		if err := p.s.Reset(p.ctx, sluice.Request{Key: key, Algorithm: r.Algorithm, Limit: r.Limit}); err != nil {
			p.t.Fatal(err)
		}
	}
	return later
}

// advance moves Redis's clock on by dt for the fleet's set of rule: its
// members, found hot dt earlier.
func (p *hotPair) advance(rule string, dt time.Duration) {
	p.t.Helper()
	c, set := p.s.Client(), p.a.hotPrefix+rule
	m, err := c.Do(p.ctx, c.B().Zrange().Key(set).Min("0").Max("-1").Withscores().Build()).AsZScores()
	if err != nil {
		p.t.Fatal(err)
	}
	for _, z := range m {
		cmd := c.B().Zadd().Key(set).Xx().ScoreMember().ScoreMember(z.Score-float64(dt.Milliseconds()), z.Member).Build()
		if err := c.Do(p.ctx, cmd).Error(); err != nil {
			p.t.Fatal(err)
		}
	}
}

// redisTime is Redis's clock, which decides.
func (p *hotPair) redisTime() time.Time {
	p.t.Helper()
	tm, err := p.s.Client().Do(p.ctx, p.s.Client().B().Time().Build()).AsIntSlice()
	if err != nil || len(tm) != 2 {
		p.t.Fatalf("TIME: %v %v", tm, err)
	}
	return time.Unix(tm[0], tm[1]*1000)
}
