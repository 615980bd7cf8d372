package daemon

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A key that shards: auto finds hot and then cold stays on its shards until
// its own key's old state is at rest: the fleet's set keeps it the rule's
// horizon (how long a key used to the full takes to come to rest) plus
// HotKeysShareTTL after the fleet last found it hot. Hot, cold and hot
// again within a window used to admit twice the limit (its own key
// resuming from what it held, its shards from theirs), and then, with
// the key held, what its own key held before it went hot plus its shards'
// limit (the shards started empty); now that its shards are seeded with
// what its own key used, the key admits its limit.
//
// The daemon decides on Redis's clock, which the test cannot move: every
// decision falls in one window (a sliding log of 300 an hour, so no
// window's edge falls inside the test), and the time that passes between
// steps passes for the hot-key summary (the daemon's Now, and the now of
// each refresh) and for the fleet's set, whose members expire by Redis's
// clock: moving them all earlier by d is Redis's clock moving on by d.
func TestAutoShardsStayUntilAtRest(t *testing.T) {
	t.Parallel() // a Cluster and daemons of its own
	c := redistest.StartCluster(t)
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	yaml := fmt.Sprintf(`
listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], cluster: true, timeout: 10s}
rules:
  - name: auto
    rate: 300/h
    algorithm: sliding_window_log
    shards: auto
`, strings.Join(c.Addrs, ", "))
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
	// Not Run: the test refreshes the hot sets itself, at its own now. Its
	// exchanges with the fleet, seeds and calls to Redis get longer than a
	// daemon gives them, as newHotPair's: one cut short by a loaded
	// machine's pause leaves the key unmoved or unseeded, or a decision
	// made on on_error, and the counts below off.
	d, err := New(cfg, Options{ConfigPath: path, Now: func() time.Time { return *now.Load() }, seedTimeout: time.Minute, shareTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	s := d.lazy.s.Load()
	if s == nil || s.Masters() != 3 {
		t.Fatalf("store %v, want connected to 3 masters", s)
	}
	e := d.engine()
	r := e.Rules().Rule("auto")
	key := r.Name + "|" + r.Fingerprint + "|tenant"
	ttl := HotKeysShareTTL + time.Hour // the log's horizon: an hour
	if got := (*d.hotAuto.Load())["auto"]; got != ttl {
		t.Errorf("the rule's time in the fleet's set: %v, want %v", got, ttl)
	}
	ctx := context.Background()
	set := d.hotPrefix + "auto"
	redisNow := func() int64 { // ms, as the script reads it
		t.Helper()
		tm, err := s.Client().Do(ctx, s.Client().B().Time().Build()).AsStrSlice()
		if err != nil {
			t.Fatal(err)
		}
		sec, _ := strconv.ParseInt(tm[0], 10, 64)
		us, _ := strconv.ParseInt(tm[1], 10, 64)
		return sec*1000 + us/1000
	}
	// advance moves Redis's clock on by dt for the fleet's set.
	advance := func(dt time.Duration) {
		t.Helper()
		m, err := s.Client().Do(ctx, s.Client().B().Zrange().Key(set).Min("0").Max("-1").Withscores().Build()).AsZScores()
		if err != nil {
			t.Fatal(err)
		}
		for _, z := range m {
			cmd := s.Client().B().Zadd().Key(set).Xx().ScoreMember().ScoreMember(z.Score-float64(dt.Milliseconds()), z.Member).Build()
			if err := s.Client().Do(ctx, cmd).Error(); err != nil {
				t.Fatal(err)
			}
		}
	}
	// refresh is a refresh of the hot sets at at; traffic seen elsewhere
	// (requests n of cost 2, decided or not) makes the key hot first.
	refresh := func(at time.Time, traffic int) {
		t.Helper()
		now.Store(&at)
		for range traffic {
			d.hot.Rule("auto").Observe(key, 2, at)
		}
		before := redisNow()
		d.refreshHot(at)
		if traffic > 0 {
			score, err := s.Client().Do(ctx, s.Client().B().Zscore().Key(set).Member(key).Build()).AsFloat64()
			if err != nil {
				t.Fatalf("the key in the fleet's set after it went hot: %v", err)
			}
			if lo, hi := before+ttl.Milliseconds(), redisNow()+ttl.Milliseconds(); int64(score) < lo || int64(score) > hi {
				t.Errorf("the key's expiry in the fleet's set: %d, want Redis's time of the refresh plus %v, %d … %d", int64(score), ttl, lo, hi)
			}
		}
	}
	decide := func(name string, n, want int, sharded bool) int {
		t.Helper()
		if got := d.hot.Rule("auto").IsHot(key); got != sharded {
			t.Errorf("%s: IsHot = %v, want %v (sharded)", name, got, sharded)
		}
		admitted := 0
		for range n {
			if e.Check(ctx, r, key, 1).Allowed {
				admitted++
			}
		}
		if admitted != want {
			t.Errorf("%s: admitted %d of %d, want %d", name, admitted, n, want)
		}
		return admitted
	}
	total := 0
	// Cold: its own key counts 200 of 300 (200 decisions read as ≈ 14/s).
	refresh(t0, 0)
	total += decide("cold", 200, 200, false)
	// Hot: its shards are seeded with the 200 its own key used, 100 more.
	refresh(t0, 8000)
	total += decide("hot", 400, 100, true)
	// A minute on the key cools down here (its rate read ≈ 17/s), but the
	// fleet keeps it: it stays on its shards, which are out.
	advance(time.Minute)
	refresh(t0.Add(time.Minute), 0)
	if got := d.hot.Rule("auto").Hot.Local(); len(got) != 0 {
		t.Fatalf("a minute on, this instance's own hot keys: %q, want none", got)
	}
	total += decide("cold again", 400, 0, true)
	// Hot again: still its shards.
	refresh(t0.Add(time.Minute), 8000)
	total += decide("hot again", 400, 0, true)
	if total != 300 {
		t.Errorf("one window of 300: admitted %d, want 300 (its own key's 200 before it went hot and its shards' 100 left)", total)
	}
	// It leaves its shards ttl after the fleet last found it hot (the
	// minute's refresh), not a minute sooner, and not a minute later.
	advance(ttl - time.Minute)
	refresh(t0.Add(ttl), 0)
	if !d.hot.Rule("auto").IsHot(key) {
		t.Errorf("%v after the fleet last found it hot: the key left its shards, want it kept until %v", ttl-time.Minute, ttl)
	}
	advance(2 * time.Minute)
	refresh(t0.Add(ttl+2*time.Minute), 0)
	if d.hot.Rule("auto").IsHot(key) {
		t.Errorf("%v after the fleet last found it hot: the key is still on its shards, want it back on its own key after %v", ttl+time.Minute, ttl)
	}
}

// The fleet's set of a rule holds its maxFleetHot keys found hot last: a
// key just found hot is read back, and sharded by every instance, however
// many keys are waiting out their time in it (each stays an hour or more
// under a limit per hour). The set used to be read back soonest expiry
// first, up to maxFleetHot: the key found hot last was the one left out.
func TestHotShareKeepsNewest(t *testing.T) {
	srv := redistest.StartServer(t)
	cfg, err := config.Parse("sluice.yaml", []byte(fmt.Sprintf(`
listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s}
rules:
  - {name: r, rate: 10/s}
`, srv.Addr)))
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	s := d.lazy.s.Load()
	ctx := context.Background()
	old := make([]string, maxFleetHot)
	for i := range old {
		old[i] = fmt.Sprintf("old-%04d", i)
	}
	share := func(keys ...string) []string {
		t.Helper()
		args := append([]string{strconv.FormatInt(time.Hour.Milliseconds(), 10)}, keys...)
		got, _, _, err := shareReply(shareHot.Exec(ctx, s.Client(), []string{"hot:r"}, args))
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	share(old...)
	// "zzz-new" sorts after every old key: at an equal score (the same
	// millisecond), Redis orders the members by name.
	got := share("zzz-new")
	if len(got) > maxFleetHot || !slices.Contains(got, "zzz-new") {
		t.Errorf("after %d keys, a new one: read back %d keys, with the new one %v; want at most %d, with it", maxFleetHot, len(got), slices.Contains(got, "zzz-new"), maxFleetHot)
	}
	if n, err := s.Client().Do(ctx, s.Client().B().Zcard().Key("hot:r").Build()).AsInt64(); err != nil || n > maxFleetHot {
		t.Errorf("the set holds %d keys (%v), want at most %d", n, err, maxFleetHot)
	}
}

// restAfter is how long a key takes to come to rest after its last
// decision, at the latest: no state reached by decisions that were
// admitted (forced charges aside) rests later, at any instant.
func TestRestAfterIsTheLatest(t *testing.T) {
	limits := []sluice.Limit{
		sluice.PerHour(300),
		sluice.PerSecond(10).WithBurst(50),
		sluice.PerMinute(60).WithSegments(6),
		sluice.PerDay(7),
		sluice.PerSecond(1000).WithBurst(3),
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, l := range limits {
		for _, a := range sluice.Algorithms() {
			if l.Burst != 0 && !a.TakesBurst() {
				continue // a window takes no burst (the config refuses one)
			}
			h := restAfter(a, l)
			if h <= 0 {
				t.Errorf("%v %v: restAfter = %v, want > 0", a, l, h)
				continue
			}
			for range 200 {
				var st sluice.State
				// Half the runs start where a window starts, with requests
				// as large as the limit.
				at := sluice.MinTime.Add(time.Duration(rng.Int64N(int64(1000 * time.Hour))))
				big := int64(3)
				if rng.IntN(2) == 0 {
					at = sluice.MinTime.Add(time.Duration(rng.Int64N(1000)) * l.Period)
					big = max(l.Rate, l.Burst) + 1
				}
				var idle time.Time
				for i := range rng.IntN(40) + 1 {
					if i > 0 {
						at = at.Add(time.Duration(rng.Int64N(int64(l.Period / 4))))
					}
					dec, rest, err := a.Take(&st, l, at, rng.Int64N(big)+1)
					if err != nil {
						t.Fatalf("%v %v: %v", a, l, err)
					}
					if dec.Allowed {
						idle = rest
					}
					if got := idle.Sub(at); got > h {
						t.Fatalf("%v %v: at rest %v after a decision, want at most restAfter = %v", a, l, got, h)
					}
				}
			}
		}
	}
}
