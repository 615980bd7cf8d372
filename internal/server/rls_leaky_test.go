package server_test

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestLeakyBucketNotHeld: Envoy cannot hold a request until its leaky
// bucket slot comes, so a request given a place in the queue is answered
// OK at once: a leaky_bucket descriptor of 2/minute (its queue of 2)
// admits three requests at once, the one leaving and the two queued, then
// one every 30 s, as a token bucket of 3 would; limit_remaining counts
// the places left, up to 3. On memory, a single Redis and a Cluster alike.
func TestLeakyBucketNotHeld(t *testing.T) {
	t.Parallel() // a store (a Cluster's start, for the cluster kind) and a service of its own
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			var at atomic.Int64 // seconds after tMid
			now := func() time.Time { return tMid.Add(time.Duration(at.Load()) * time.Second) }
			e := startRLS(t, newStore(t, kind), writeConf(t, `domain: p
descriptors:
  - key: lb
    algorithm: leaky_bucket
    rate_limit: {unit: minute, requests_per_unit: 2}
`), envOpts{now: now})
			if got := e.remaining(t, "p", "lb", "a"); got != 3 {
				t.Errorf("remaining of a key at rest = %d, want 3 (the slot leaving and the queue of 2)", got)
			}
			r := e.expect(t, "at once", []string{"O:O", "O:O", "O:O", "X:X"}, "p", desc("lb", "a"))
			if d := r.Statuses[0].DurationUntilReset.GetSeconds(); d != 90 {
				t.Errorf("duration_until_reset when over = %d s, want 90 (until the queue of three has left)", d)
			}
			at.Store(29)
			e.expect(t, "29 s on", []string{"X:X"}, "p", desc("lb", "a"))
			at.Store(30)
			e.expect(t, "30 s on", []string{"O:O", "X:X"}, "p", desc("lb", "a"))
		})
	}
}
