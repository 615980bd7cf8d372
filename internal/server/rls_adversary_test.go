package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/metrics/metricstest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// TestRLSAdversaryOnCluster: an Envoy client's descriptors on a real
// 3-node Cluster, through Redis exactly and through the daemon's fleet
// stacks (an over-limit cache over a lease, over a sync), with on_error
// allow: values that carry hash tags of their own ({x}, }{, {}), a value
// long enough to be hashed, hits_addend at the bounds (0, past the limit,
// 2^62 − 1), is_negative_hits past what was counted, and a descriptor
// with its own limit in the same request (another slot). Any store error
// would answer OK uncounted; there is none, and a value never passes its
// limit.
func TestRLSAdversaryOnCluster(t *testing.T) {
	t.Parallel() // a Cluster of its own
	cl := redistest.StartCluster(t)
	// Each stack counts under a prefix of its own; on Redis' clock, as
	// the daemon decides, in one hour's window.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	open := func(prefix string) *redisstore.Store { return openCluster(t, cl, prefix, true) }
	lease, err := fleet.NewLease(open("lease:"), fleet.LeaseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lease.Close() })
	syn, err := fleet.NewSync(open("sync:"), fleet.SyncOptions{Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syn.Close() })
	set := writeConf(t, `domain: web
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: global
    rate_limit: {unit: hour, requests_per_unit: 1000}
`)
	for _, st := range []struct {
		name  string
		store sluice.Store
	}{
		{"exact", open("exact:")},
		{"cache+lease", fleet.NewOverLimitCache(lease, fleet.OverLimitOptions{})},
		{"cache+sync", fleet.NewOverLimitCache(syn, fleet.OverLimitOptions{})},
	} {
		t.Run(st.name, func(t *testing.T) {
			e := startRLS(t, st.store, set, envOpts{onError: "allow", now: time.Now})
			for _, v := range hashTagValues {
				ok := 0
				for range 8 {
					r := e.call(t, "web", 0, desc("user", v), desc("global", "{"+v+"}"), withLimit(desc("own", v), 3, typev3.RateLimitUnit_HOUR))
					if codesOf(r)[0] == 'O' {
						ok++
					}
				}
				// The override of 3/h is the tightest.
				if ok != 3 {
					t.Errorf("value %.20q: %d of 8 requests admitted, want the override's 3", v, ok)
				}
				// hits_addend at the bounds, on a value of its own.
				hv := "hits" + v
				for _, step := range []struct {
					hits uint64
					want string
				}{
					{0, "O:O"}, {6, "X:X"}, {1<<62 - 1, "X:X"}, {5, "O:O"}, {0, "O:O"}, {1, "X:X"},
				} {
					r := e.call(t, "web", 0, withHits(desc("user", hv), step.hits))
					if got := codesOf(r); got != step.want {
						t.Errorf("value %.20q, hits_addend %d: %s, want %s", hv, step.hits, got, step.want)
					}
				}
				// A give-back past what was counted leaves the counter at
				// zero, not below: the limit again, no more.
				neg := withHits(desc("user", hv), 1<<62-1)
				neg.IsNegativeHits = true
				if got := codesOf(e.call(t, "web", 0, neg)); got != "O:O" {
					t.Errorf("value %.20q, is_negative_hits 2^62-1: %s, want O:O", hv, got)
				}
				ok = 0
				for range 8 {
					if codesOf(e.call(t, "web", 0, desc("user", hv)))[0] == 'O' {
						ok++
					}
				}
				if ok != 5 {
					t.Errorf("value %.20q after the give-back: %d of 8 admitted, want the limit's 5", hv, ok)
				}
			}
			m := metricstest.Gather(t, e.reg)
			if got, ok := m["sluice_store_errors_total"]; !ok || got != 0 {
				t.Errorf("sluice_store_errors_total = %v (exported: %v), want 0: a store error answers OK uncounted under on_error allow", got, ok)
			}
		})
	}
}

// hashTagValues are key values a client may send that carry hash tags of
// their own, or halves of one, and one long enough to be hashed.
var hashTagValues = []string{"{x}", "}{", "{}", "{", `\`, "a}b{c", strings.Repeat("{z}", 200)}

// openCluster opens a store on the Cluster cl counting under prefix, that
// publishes its refunds, on Redis's clock if redisTime.
func openCluster(t *testing.T, cl *redistest.Cluster, prefix string, redisTime bool) *redisstore.Store {
	t.Helper()
	st, err := redisstore.New(context.Background(), redisstore.Options{Addrs: cl.Addrs, Cluster: true, Timeout: 5 * time.Second, PublishRefunds: true, RedisTime: redisTime, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}
