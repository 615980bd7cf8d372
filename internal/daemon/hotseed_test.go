package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/descriptors"
	"github.com/sluicehq/sluice/internal/hotkeys"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A key that shards: auto moves to its shards, or back, keeps what it used:
// across both moves the fleet admits its limit in the window, not more.
// The shards of a key going hot used to start empty, and its own key
// coming back to start at rest while its shards had counted in the
// window: each move could admit one extra limit. Now the instance that
// adds the key to the fleet's set seeds its shards with what its own key
// used, and the one that takes it out seeds its own key with what the
// shards used.
//
// Two instances, one rule per algorithm, 60 a day (the leaky bucket's
// queue holds 61), on a 3-node Cluster, in steady overload: every request
// beyond what the key has left is refused. Decisions are on Redis's
// clock, which does not move here: the time the test lets pass passes for
// the hot-key summaries (the refreshes' now), for the fleet's set (its
// members moved earlier) and for the key's own counter, which the key's
// horizon brings to rest (it is reset: nothing used it meanwhile).
//
// Tolerance: none. The moves' arithmetic is exact here: 40 used of 60 is
// seeded as 14, 13 and 13 on shares of 20 each; 30 requests spread
// round-robin, 10 on each shard, take the 20 left.
func TestAutoShardsMoveKeepsCount(t *testing.T) {
	t.Parallel() // a Cluster and daemons of its own
	var rulesYAML strings.Builder
	for _, a := range sluice.Algorithms() {
		fmt.Fprintf(&rulesYAML, "  - {name: %s, rate: 60/d, algorithm: %s, shards: auto}\n", strings.ReplaceAll(a.String(), "_", "-"), a)
	}
	p := newHotPair(t, rulesYAML.String())
	a, b, ctx, t0 := p.a, p.b, p.ctx, p.t0
	type ruleCase struct {
		name  string
		key   string
		limit int // what the key admits in the window
		total int
	}
	var cases []*ruleCase
	keys := map[string]string{}
	for _, r := range a.engine().Rules().Rules {
		limit := int(r.Limit.Rate)
		if r.Algorithm == sluice.LeakyBucket {
			limit = int(r.Limit.BurstOrRate()) + 1
		}
		cases = append(cases, &ruleCase{name: r.Name, key: r.Name + "|" + r.Fingerprint + "|tenant", limit: limit})
		keys[r.Name] = cases[len(cases)-1].key
	}
	refresh := func(d *Daemon, at time.Time, hot bool) { t.Helper(); p.refresh(d, at, hot, keys) }
	decide := func(d *Daemon, step string, n int, want func(rc *ruleCase) int, sharded bool) {
		t.Helper()
		e := d.engine()
		for _, rc := range cases {
			if got := d.hot.Rule(rc.name).IsHot(rc.key); got != sharded {
				t.Errorf("%s, %s: IsHot = %v, want %v", rc.name, step, got, sharded)
			}
			r := e.Rules().Rule(rc.name)
			admitted := 0
			for range n {
				if e.Check(ctx, r, rc.key, 1).Allowed {
					admitted++
				}
			}
			rc.total += admitted
			if w := want(rc); admitted != w {
				t.Errorf("%s, %s: admitted %d of %d, want %d", rc.name, step, admitted, n, w)
			}
		}
	}
	// Cold: the key's own counter, 40 used.
	refresh(a, t0, false)
	refresh(b, t0, false)
	decide(a, "cold", 40, func(*ruleCase) int { return 40 }, false)
	// Hot on both instances (a first: it adds the key to the fleet's set
	// and seeds the shards; b finds it there): what is left is the key's
	// limit less 40, not a fresh limit.
	refresh(a, t0, true)
	refresh(b, t0, true)
	decide(a, "hot, instance a", 15, func(*ruleCase) int { return 15 }, true)
	decide(b, "hot, instance b", 15, func(rc *ruleCase) int { return rc.limit - 40 - 15 }, true)
	// Cold for the fleet past the key's time in its set: the key's own
	// counter has come to rest (untouched since the key went hot), the
	// shards are full.
	later := p.pastHorizon(keys)
	refresh(a, later, false)
	refresh(b, later, false)
	decide(b, "cold again", 100, func(*ruleCase) int { return 0 }, false)
	for _, rc := range cases {
		if rc.total != rc.limit {
			t.Errorf("%s: admitted %d in the window over two moves, want its limit %d", rc.name, rc.total, rc.limit)
		}
	}
}

// The seeds rebuild a key's request from its summary's name and the key
// as the fleet's set holds it (its bytes, UTF-8 or not): a rule's key is
// its store key, a descriptor's lacks the descriptor's head; a key longer
// than the summary keeps (held as its text: first bytes, "…", digest)
// cannot be rebuilt and is left alone, as is one of a rule without
// shards: auto. A key that merely ends as a digested text does ("…" and
// 16 hex digits: a client chooses its key), as does one that is not
// UTF-8: both were left alone, uncharged.
func TestHotRequest(t *testing.T) {
	srv := redistest.StartServer(t)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "ratelimit"), 0o755); err != nil {
		t.Fatal(err)
	}
	desc := "domain: hot\ndescriptors:\n  - key: user\n    shards: auto\n    rate_limit: {unit: minute, requests_per_unit: 70}\n"
	if err := os.WriteFile(filepath.Join(dir, "ratelimit", "hot.yaml"), []byte(desc), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sluice.yaml")
	yaml := fmt.Sprintf(`
listen: 127.0.0.1:0
grpc: {listen: 127.0.0.1:0, config: [ratelimit]}
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s}
rules:
  - {name: auto, rate: 50/h, algorithm: gcra, shards: auto}
  - {name: fixed, rate: 50/h, shards: 3}
`, srv.Addr)
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(cfg, Options{ConfigPath: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	gen := d.cur.Load()
	var m descriptors.Match
	entries := []descriptors.Entry{{Key: "user", Value: "busy"}}
	d.descriptorSet().Lookup("hot", entries, &m)
	if m.Rule == nil || !m.Rule.Shards.Auto {
		t.Fatalf("descriptor user: %+v, want shards: auto", m.Rule)
	}
	storeKey := m.StoreKey(entries)
	auto := gen.rules.Rule("auto")
	ruleKey := "auto|" + auto.Fingerprint + "|tenant"
	for _, c := range []struct {
		rule, key string
		want      sluice.Request
		ok        bool
	}{
		{"auto", ruleKey, sluice.Request{Key: ruleKey, Algorithm: sluice.GCRA, Limit: auto.Limit}, true},
		{"envoy/hot/user", strings.TrimPrefix(storeKey, m.Rule.Head()), sluice.Request{Key: storeKey, Algorithm: m.Rule.Algorithm, Limit: m.Rule.Limit}, true},
		{"fixed", "fixed|" + gen.rules.Rule("fixed").Fingerprint + "|tenant", sluice.Request{}, false},
		{"gone", "gone|0|tenant", sluice.Request{}, false},
		{"auto", ruleKey + "…0123456789abcdef", sluice.Request{Key: ruleKey + "…0123456789abcdef", Algorithm: sluice.GCRA, Limit: auto.Limit}, true},
		{"auto", ruleKey + "\xff\xfe", sluice.Request{Key: ruleKey + "\xff\xfe", Algorithm: sluice.GCRA, Limit: auto.Limit}, true},
		{"auto", ruleKey + strings.Repeat("x", hotkeys.DefaultMaxKeyBytes-len(ruleKey)+1), sluice.Request{}, false},
	} {
		got, ok := hotRequest(gen, c.rule, c.key)
		if ok != c.ok || ok && got != c.want {
			t.Errorf("hotRequest(%q, %q) = %+v, %v; want %+v, %v", c.rule, c.key, got, ok, c.want, c.ok)
		}
	}
	// What the summary hands the fleet (Key.Raw): a long key's text,
	// which hotRequest leaves alone, and any other key's bytes.
	sum := hotkeys.New(hotkeys.Options{Sample: 1})
	long := ruleKey + strings.Repeat("é", 300)
	now := time.Now()
	sum.Observe(long, 1, now)
	if top, _ := sum.Top(1, now); len(top) != 1 || len(top[0].Raw) <= hotkeys.DefaultMaxKeyBytes {
		t.Errorf("the summary's key of a key of %d bytes: %+v, want its text, past %d bytes", len(long), top, hotkeys.DefaultMaxKeyBytes)
	} else if _, ok := hotRequest(gen, "auto", top[0].Raw); ok {
		t.Errorf("hotRequest of a long key's text %q: ok, want left alone", top[0].Raw)
	}
}
