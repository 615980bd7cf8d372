package fleet_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// TestOverLimitClockStepsBack: over Redis' clock (RedisTime, as the daemon
// runs it), a refusal the cache remembers must not outlive Redis' when the
// instance's clock steps back (an NTP step, a VM resumed): once Redis' own
// refusal has ended, a request whose Now is 2 s behind goes to Redis and
// is admitted. Before, the cache ended its refusals on the requests'
// clock only, and refused it from memory for 2 s more. Over one Redis and
// a 3-node Cluster.
func TestOverLimitClockStepsBack(t *testing.T) {
	onServerAndCluster(t, testOverLimitClockStepsBack)
}

func testOverLimitClockStepsBack(t *testing.T, o redisstore.Options) {
	o.RedisTime = true
	ctx := context.Background()
	st := fleet.OpenRedis(t, o)
	c := fleet.NewOverLimitCache(st, fleet.OverLimitOptions{StoreClock: true})
	const period = time.Second
	for _, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.TokenBucket, sluice.SlidingWindowLog} {
		key := fmt.Sprintf("olstep/%v/%d", alg, time.Now().UnixNano())
		take := func(step time.Duration) sluice.Decision {
			t.Helper()
			d, err := c.Take(ctx, sluice.Request{Key: key, Algorithm: alg, Limit: sluice.Every(1, period), Cost: 1, Now: time.Now().Add(step)})
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		redistest.ClearOfWindowEdge(t, period, period/4)
		if d := take(0); !d.Allowed {
			t.Fatalf("%v: the first request refused: %+v", alg, d)
		}
		d := take(0) // refused by Redis, and remembered
		if d.Allowed {
			t.Fatalf("%v: the second request admitted: %+v", alg, d)
		}
		if hits := c.Hits(); take(0).Allowed || c.Hits() != hits+1 {
			t.Fatalf("%v: the third request was not refused from the cache", alg)
		}
		// Redis admits again once its RetryAfter has passed.
		end := time.Now().Add(d.RetryAfter + 10*time.Millisecond)
		for time.Now().Before(end) {
			time.Sleep(time.Until(end))
		}
		hits := c.Hits()
		if d := take(-2 * time.Second); !d.Allowed || c.Hits() != hits {
			t.Errorf("%v: after Redis' refusal ended, a request on a clock stepped 2 s back was refused (from the cache: %v): %+v", alg, c.Hits() != hits, d)
		}
	}
}
