package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/redistest"
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
// A key of shards: auto that leaves the fleet's set and comes back while
// its counters are not at rest is charged once, not twice. The set's
// bound (maxFleetHot, the keys found hot last) can drop a key still in
// use: the instance whose exchange drops it charged the key's own
// counter, still holding what it used before the key went hot, with the
// shards' count on top, and the instance that added it back charged the
// shards, still holding theirs, with that sum on top: 40 used of 60, and
// both counters read full (own 0 left, shards 0, 0, 0), 20 refused that
// the limit admits. A move now brings the counter it goes to up to what
// the key used, adding only what that counter lacks.
//
// As TestAutoShardsMoveKeepsCount (same clocks), fixed_window of 60 a day.
func TestAutoShardsBoundDropChargedOnce(t *testing.T) {
	c := redistest.StartCluster(t)
	// The fixed window counts in days since the epoch: not across
	// midnight UTC.
	redistest.ClearOfWindowEdge(t, 24*time.Hour, 5*time.Minute)
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	var rulesYAML strings.Builder
	for _, a := range []sluice.Algorithm{sluice.FixedWindow} {
		fmt.Fprintf(&rulesYAML, "  - {name: %s, rate: 60/d, algorithm: %s, shards: auto}\n", strings.ReplaceAll(a.String(), "_", "-"), a)
	}
	yaml := fmt.Sprintf(`
listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], cluster: true, timeout: 2s}
rules:
%s`, strings.Join(c.Addrs, ", "), rulesYAML.String())
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	var now atomic.Pointer[time.Time]
	now.Store(&t0)
	open := func() *Daemon {
		d, err := New(cfg, Options{ConfigPath: path, Now: func() time.Time { return *now.Load() }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		if s := d.lazy.s.Load(); s == nil || s.Masters() != 3 {
			t.Fatalf("store %v, want connected to 3 masters", s)
		}
		return d
	}
	a, b := open(), open()
	s := a.lazy.s.Load()
	ctx := context.Background()
	type ruleCase struct {
		name, key string
		total     int
	}
	var cases []*ruleCase
	for _, r := range a.engine().Rules().Rules {
		cases = append(cases, &ruleCase{name: r.Name, key: r.Name + "|" + r.Fingerprint + "|tenant"})
	}
	refresh := func(d *Daemon, at time.Time, hot bool) {
		t.Helper()
		now.Store(&at)
		if hot {
			for _, rc := range cases {
				for range 8000 {
					d.hot.Rule(rc.name).Observe(rc.key, 2, at)
				}
			}
		}
		d.refreshHot(at)
	}
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
	// raw checks what Redis holds of the key's own counter and shards.
	raw := func(step string, wantOwn int64, wantShards []int64) {
		t.Helper()
		for _, rc := range cases {
			r := a.engine().Rules().Rule(rc.name)
			req := sluice.Request{Key: rc.key, Algorithm: r.Algorithm, Limit: r.Limit}
			dd, err := s.Take(ctx, req) // cost 0: questions
			if err != nil {
				t.Fatal(err)
			}
			ps := s.Shards(req, 3)
			ds := make([]sluice.Decision, len(ps))
			if err := s.TakeAll(ctx, ps, ds); err != nil {
				t.Fatal(err)
			}
			var rem []int64
			for i := range ds {
				rem = append(rem, ds[i].Remaining)
			}
			if dd.Remaining != wantOwn || !slices.Equal(rem, wantShards) {
				t.Errorf("%s, %s: Remaining of the own key %d, of the shards %v; want %d, %v", rc.name, step, dd.Remaining, rem, wantOwn, wantShards)
			}
		}
	}
	raw("hot, seeded", 20, []int64{6, 7, 7})
	// 1000 other keys, hot longer than this one: the set's bound drops it.
	for _, rc := range cases {
		set := a.hotPrefix + rc.name
		for i := range maxFleetHot {
			cmd := s.Client().B().Zadd().Key(set).ScoreMember().ScoreMember(4e12, fmt.Sprintf("other%d", i)).Build()
			if err := s.Client().Do(ctx, cmd).Error(); err != nil {
				t.Fatal(err)
			}
		}
	}
	refresh(b, t0, true)
	raw("dropped by the bound", 20, []int64{6, 7, 7})
	for _, rc := range cases {
		set := a.hotPrefix + rc.name
		if err := s.Client().Do(ctx, s.Client().B().Zrem().Key(set).Member("other0").Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	refresh(a, t0, true)
	raw("added back", 20, []int64{6, 7, 7})
	decide(a, "hot again", 100, true)
	for _, rc := range cases {
		if rc.total != 60 {
			t.Errorf("%s: admitted %d in the window over two moves, want its limit 60", rc.name, rc.total)
		}
	}
}
