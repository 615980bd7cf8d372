package daemon

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// A key of a rule with a lease (a hard limit) that shards: auto moves to
// its shards and back keeps what it used, as an exact rule's does. The
// seeds asked their questions (cost 0) through the engine's store, which
// sends a lease rule's to the instance's lease: it answered from the units
// it holds, not from Redis, and saw the shards that the fleet had used to
// the full as unused (Remaining 20 of 20 each): the key came back to its
// own counter uncharged, and the fleet admitted 117 in the window on a
// limit of 60.
//
// As TestAutoShardsMoveKeepsCount (same steps, same clocks), with lease:
// 5. Instances hold units (counted in Redis as taken), so the steps admit
// less than an exact rule's; what must hold is the limit over the moves.
func TestAutoShardsLeaseMoveKeepsCount(t *testing.T) {
	t.Parallel() // a Cluster and daemons of its own
	var rulesYAML strings.Builder
	for _, a := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA, sluice.FixedWindow} {
		fmt.Fprintf(&rulesYAML, "  - {name: %s, rate: 60/d, algorithm: %s, shards: auto, lease: 5}\n", strings.ReplaceAll(a.String(), "_", "-"), a)
	}
	p := newHotPair(t, rulesYAML.String())
	a, b, ctx, t0 := p.a, p.b, p.ctx, p.t0
	type ruleCase struct {
		name, key string
		total     int
	}
	var cases []*ruleCase
	keys := map[string]string{}
	for _, r := range a.engine().Rules().Rules {
		cases = append(cases, &ruleCase{name: r.Name, key: r.Name + "|" + r.Fingerprint + "|tenant"})
		keys[r.Name] = cases[len(cases)-1].key
	}
	refresh := func(d *Daemon, at time.Time, hot bool) { t.Helper(); p.refresh(d, at, hot, keys) }
	decide := func(d *Daemon, step string, n int, sharded bool) {
		t.Helper()
		e := d.engine()
		for _, rc := range cases {
			if got := d.hot.Rule(rc.name).IsHot(rc.key); got != sharded {
				t.Errorf("%s, %s: IsHot = %v, want %v", rc.name, step, got, sharded)
			}
			r := e.Rules().Rule(rc.name)
			for range n {
				if e.Check(ctx, r, rc.key, 1).Allowed {
					rc.total++
				}
			}
		}
	}
	refresh(a, t0, false)
	refresh(b, t0, false)
	decide(a, "cold", 40, false)
	refresh(a, t0, true)
	refresh(b, t0, true)
	decide(a, "hot, instance a", 15, true)
	decide(b, "hot, instance b", 15, true)
	// Cold for the fleet past the key's time in its set (its members
	// moved earlier: Redis's clock moving on), its own counter at rest.
	later := p.pastHorizon(keys)
	refresh(a, later, false)
	refresh(b, later, false)
	decide(b, "cold again", 100, false)
	for _, rc := range cases {
		if rc.total > 60 {
			t.Errorf("%s: admitted %d in the window over two moves, want at most its limit 60", rc.name, rc.total)
		}
	}
}
