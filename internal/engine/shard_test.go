package engine_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/hotkeys"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/memstore"
)

// shards: auto shards a hot key whatever its length: one longer than the
// summary keeps (hotkeys.DefaultMaxKeyBytes) is found hot too.
func TestAutoShardsLongKey(t *testing.T) {
	hot := hotkeys.NewSet(hotkeys.Options{Sample: 1}, 0, 0)
	var sharded atomic.Int64
	r := &rules.Rule{Name: "auto", Algorithm: sluice.TokenBucket, Limit: sluice.PerSecond(1_000_000), Shards: rules.AutoCount{Auto: true}}
	e, err := engine.New(engine.Options{Store: memstore.New(memstore.Options{}), Rules: &rules.Set{Rules: []*rules.Rule{r}},
		Metrics: metrics.New(prometheus.NewRegistry()), Now: func() time.Time { return t0 }, HotKeys: hot,
		Shard:      func(*sluice.Request, int) int { sharded.Add(1); return 1 },
		AutoShards: func() int { return 3 }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, key := range []string{"auto|fp|short", "auto|fp|" + strings.Repeat("v", 600)} {
		// 8,000 decisions at one instant: 8000/τ ≈ 554/s, past the hot
		// rate of 500/s.
		for range 8000 {
			e.Check(ctx, r, key, 1)
		}
		hot.Refresh(t0)
		before := sharded.Load()
		e.Check(ctx, r, key, 1)
		if sharded.Load() != before+1 {
			top := hot.Top(3, t0)
			t.Errorf("key of %d bytes at ~554/s: not sharded; hot keys %+v", len(key), top)
		}
	}
}

// The RateLimit field's t is the next token for a rule's own key, but for
// a rule whose keys may be sharded the decision is one shard's with its
// Remaining scaled up, from which the next token cannot be told: t is then
// the time until full, as X-RateLimit-Reset.
func TestShardedRuleSendsTUntilFull(t *testing.T) {
	d := sluice.Decision{Allowed: true, Limit: 10, Remaining: 7, ResetAfter: 16 * time.Second}
	for _, c := range []struct {
		shards rules.AutoCount
		want   string
	}{
		{rules.AutoCount{}, `"r";r=7;t=4`},
		{rules.AutoCount{N: 2}, `"r";r=7;t=16`},
		{rules.AutoCount{Auto: true}, `"r";r=7;t=16`},
	} {
		r := &rules.Rule{Name: "r", Algorithm: sluice.TokenBucket, Limit: sluice.PerMinute(10), Shards: c.shards}
		res := engine.Result{Allowed: true, Rule: r, Decision: d}
		h := http.Header{}
		res.SetHeaders(h)
		if got := h.Get("RateLimit"); got != c.want {
			t.Errorf("shards %v: RateLimit %q, want %q", c.shards, got, c.want)
		}
	}
}
