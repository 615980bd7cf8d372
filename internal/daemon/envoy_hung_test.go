package daemon

import (
	"fmt"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/engine"
)

// TestEnvoyNegativeHitsRedisHung: the daemon bounds an Envoy call's store
// calls by one store.redis.timeout (2s here) together: a call of 5
// refunds and a take with Redis hung (paused) ends within about one
// timeout, not one per refund and one more for the take. The refunds are
// answered OK and counted as not given back, the take as on_error (allow)
// says. That the engine bounds them so, given a StoreTimeout, is
// TestNegativeHitsRedisHung's (package server) and
// TestNegativeStoreCallsShareDeadline's (package engine); here, that the
// daemon gives it store.redis.timeout, and that the call returns (within
// 20 timeouts: a hang detector, not a measure a loaded machine can miss).
func TestEnvoyNegativeHitsRedisHung(t *testing.T) {
	const timeout = 2 * time.Second
	ed, redis := startEnvoyRedisTimeout(t, t.TempDir(), `domain: d
descriptors:
  - key: user
    rate_limit: {unit: year, requests_per_unit: 10}
  - key: global
    rate_limit: {unit: year, requests_per_unit: 100}
`, timeout.String())
	if got := ed.d.engineOptions(engine.Options{}, ed.d.Config()).StoreTimeout; got != timeout {
		t.Fatalf("the engine's StoreTimeout: %v, want store.redis.timeout, %v", got, timeout)
	}
	const k = 5
	var ds []*commonv3.RateLimitDescriptor
	for i := range k {
		user := fmt.Sprint("u", i)
		ed.ask("d", entries("user", user))
		d := entries("user", user)
		d.IsNegativeHits = true
		ds = append(ds, d)
	}
	ds = append(ds, entries("global", "g"))
	redis.Pause()
	start := time.Now()
	r := ed.ask("d", ds...)
	took := time.Since(start)
	redis.Resume()
	if took > 20*timeout {
		t.Errorf("a call of %d refunds and a take with Redis hung took %v: hung, past 20 store timeouts (%v)", k, took, timeout)
	}
	if r.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("with Redis hung, on_error allow: %v, want OK", r.OverallCode)
	}
	for i, s := range r.Statuses {
		if s.Code != rlsv3.RateLimitResponse_OK || s.CurrentLimit != nil {
			t.Errorf("status %d with Redis hung: %v; want OK without figures", i, s)
		}
	}
	if got := ed.metric("sluice_envoy_negative_hits_failed_total", "domain", "d", "descriptor", "user"); got != k {
		t.Errorf("negative hits the store could not give back: %v, want %d", got, k)
	}
}
