package server_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/metrics/metricstest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// TestHTTPAdversaryOnCluster: /v1/check, /v1/report and forward auth on a
// real 3-node Cluster, exactly and through a lease behind the over-limit
// cache, with on_error allow: keys that carry hash tags of their own, in
// a request of two rules whose keys lie on different slots, and costs of
// 0, past the limit and 2^63 − 1. Any store error would let the request
// pass uncounted; there is none, and no key passes its limit.
func TestHTTPAdversaryOnCluster(t *testing.T) {
	t.Parallel() // a Cluster of its own
	cl := redistest.StartCluster(t)
	open := func(prefix string) *redisstore.Store { return openCluster(t, cl, prefix, false) }
	lease, err := fleet.NewLease(open("lease:"), fleet.LeaseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lease.Close() })
	for _, st := range []struct {
		name  string
		store sluice.Store
	}{
		{"exact", open("exact:")},
		{"cache+lease", fleet.NewOverLimitCache(lease, fleet.OverLimitOptions{})},
	} {
		t.Run(st.name, func(t *testing.T) {
			f := start(t, st.store, "allow", nil)
			for i, v := range hashTagValues {
				key, _ := json.Marshal(v)
				checkCost := func(cost string, want bool) {
					t.Helper()
					status, cr := check(t, f, `{"rule":"api","key":`+string(key)+`,"cost":`+cost+`}`)
					if status != 200 || cr.Allowed != want {
						t.Errorf("key %.20q, cost %s: %d allowed %v, want 200 allowed %v", v, cost, status, cr.Allowed, want)
					}
				}
				checkCost("0", true)
				checkCost("4", false) // past the 3/m
				checkCost("9223372036854775807", false)
				// POST /login counts under api (3/m, the key) and
				// login-per-ip (2/m): two keys, each its own slot.
				hdr := map[string]string{"X-Forwarded-Method": "POST", "X-Forwarded-Uri": "/login", "X-Forwarded-Host": "app.example",
					"X-Forwarded-For": fmt.Sprintf("203.0.113.%d", i+1), "X-Api-Key": v}
				for j, want := range []int{200, 200, 429} {
					if resp, body := forwardAuth(t, f, hdr); resp.StatusCode != want {
						t.Errorf("key %.20q: forward auth %d: %d %q, want %d", v, j, resp.StatusCode, body, want)
					}
				}
				checkCost("1", true) // the api key's third
				checkCost("1", false)
				checkCost("0", true)
				// A report of 2^63 − 1 is debt: charged, and the key refuses.
				rk, _ := json.Marshal("report" + v)
				resp, body := do(t, "POST", f.srv.URL+"/v1/report", `{"rule":"api","key":`+string(rk)+`,"cost":9223372036854775807}`, map[string]string{"Content-Type": "application/json"})
				if resp.StatusCode != 200 || !strings.Contains(body, `"allowed":false`) {
					t.Errorf("key %.20q: report of 2^63-1: %d %q, want 200 not allowed", v, resp.StatusCode, body)
				}
				if status, cr := check(t, f, `{"rule":"api","key":`+string(rk)+`,"cost":1}`); status != 200 || cr.Allowed {
					t.Errorf("key %.20q after a report of 2^63-1: %d allowed %v, want refused", v, status, cr.Allowed)
				}
			}
			if got, ok := metricstest.Gather(t, f.reg)["sluice_store_errors_total"]; !ok || got != 0 {
				t.Errorf("sluice_store_errors_total = %v (exported: %v), want 0: a store error lets the request pass uncounted under on_error allow", got, ok)
			}
		})
	}
}
