package daemon

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// shards: auto decides hotness per instance, so two instances could
// disagree for as long as their traffic differs: one counting a key on its
// shards, the other on the key alone, two budgets, up to twice the limit
// for as long as it lasts. The instances share their hot keys through
// Redis: a key one instance finds hot is sharded by all of them. Here
// instance b never sees the key before it shards it, and its own
// decisions on it then spread over the Cluster's nodes.
// Each call to Redis gets 10 s, as newHotPair's: a call cut short by a
// loaded machine's pause past 2 s is decided on on_error (allow), and the hot
// key's answer off.
func TestHotKeysSharedByFleet(t *testing.T) {
	t.Parallel() // a Cluster (or Redis) and daemons of its own
	c := redistest.StartCluster(t)
	conf := fmt.Sprintf(`
listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], cluster: true, timeout: 10s}
rules:
  - name: auto
    rate: 1000000/s
    shards: auto
`, strings.Join(c.Addrs, ", "))
	a, b := startDaemon(t, conf), startDaemon(t, conf)
	ea, eb := a.d.engine(), b.d.engine()
	ra, rb := ea.Rules().Rule("auto"), eb.Rules().Rule("auto")
	key := ra.Name + "|" + ra.Fingerprint + "|busy"
	ctx := context.Background()
	// a alone decides the key until it is hot there (as TestShardsOnCluster).
	waitFor(t, "the key hot on instance a", func() bool {
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 100 {
					ea.Check(ctx, ra, key, 1)
				}
			})
		}
		wg.Wait()
		return a.d.hot.Rule("auto").IsHot(key)
	})
	waitFor(t, "the key hot on instance b, which has not decided it", func() bool {
		return b.d.hot.Rule("auto").IsHot(key)
	})
	before := evalshaCalls(t, c)
	for range 300 {
		if res := eb.Check(ctx, rb, key, 1); !res.Allowed || res.Decision.Limit != 1_000_000 {
			t.Fatalf("instance b, hot key: %+v", res)
		}
	}
	if s := busiestShare(before, evalshaCalls(t, c)); s > 0.5 {
		t.Errorf("instance b on a key hot on a: busiest node ran %.0f%% of the scripts, want ≤ 50%% (sharded)", s*100)
	}
}
