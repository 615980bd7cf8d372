package engine_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/hotkeys"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/redisstore"
)

// A key that shards: auto finds hot and then cold, on a real Redis: it is
// sharded while hot and unsharded once cold, and its counts are those of
// two budgets, its own key and its shards, each of the whole limit. Its own
// key resumes, when the key cools down, from what it held when it went
// hot (what the shards admitted is not carried over, nor back when it
// heats up again, the shards resuming from their own counts): in one window
// it admits up to twice its limit, however often it switches, never more.
// This is the engine alone, following its hot set; the daemon keeps a key
// in the fleet's hot set until its own key is at rest, so that it does not
// come back to it within the window (TestAutoShardsStayUntilAtRest).
func TestAutoShardsHotThenCold(t *testing.T) {
	srv := redistest.StartServer(t)
	s, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	// Hot at 10 decisions/s, cold below 5/s: 200 decisions at one
	// instant read 200/τ ≈ 13.9/s.
	hot := hotkeys.NewSet(hotkeys.Options{Sample: 1}, 0, 10)
	var now atomic.Pointer[time.Time]
	at := func(t time.Time) { now.Store(&t) }
	at(t0)
	var sharded atomic.Int64
	r := &rules.Rule{Name: "auto", Fingerprint: "f1", Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(300), Shards: rules.AutoCount{Auto: true}}
	e, err := engine.New(engine.Options{Store: s, Rules: &rules.Set{Rules: []*rules.Rule{r}},
		Metrics: metrics.New(prometheus.NewRegistry()), Now: func() time.Time { return *now.Load() }, HotKeys: hot,
		Shard: func(q *sluice.Request, n int) int {
			n = s.Shard(q, n)
			if n > 1 {
				sharded.Add(1)
			}
			return n
		},
		AutoShards: func() int { return 3 }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := "auto|f1|tenant"
	phase := func(name string, n int, wantSharded bool) int {
		t.Helper()
		before, admitted := sharded.Load(), 0
		for range n {
			if e.Check(ctx, r, key, 1).Allowed {
				admitted++
			}
		}
		want := int64(0)
		if wantSharded {
			want = int64(n)
		}
		if got := sharded.Load() - before; got != want {
			t.Fatalf("%s: %d of %d decisions sharded, want %d", name, got, n, want)
		}
		return admitted
	}
	total := 0
	steps := []struct {
		name    string
		at      time.Time
		n       int
		sharded bool
		want    int
	}{
		// Cold: its own key counts 200 of 300.
		{"cold", t0, 200, false, 200},
		// Hot: its shards start empty, 300 more.
		{"hot", t0, 400, true, 300},
		// A minute on, cold again (rate ≈ 600/τ/64 < 5/s): its own key
		// resumes from its 200, admits 100 more.
		{"cold again", t0.Add(time.Minute), 400, false, 100},
		// Hot again: the shards resume from their 300.
		{"hot again", t0.Add(time.Minute), 400, true, 0},
	}
	for _, st := range steps {
		at(st.at)
		hot.Refresh(st.at)
		if got := hot.Rule("auto").IsHot(key); got != st.sharded {
			top := hot.Top(3, st.at)
			t.Fatalf("%s: IsHot = %v, want %v; top %+v", st.name, got, st.sharded, top)
		}
		got := phase(st.name, st.n, st.sharded)
		if got != st.want {
			t.Errorf("%s: admitted %d of %d, want %d", st.name, got, st.n, st.want)
		}
		total += got
	}
	if total != 600 {
		t.Errorf("one window of 300: admitted %d over two switches each way, want 600 (its own key's 300 and its shards' 300)", total)
	}
}
