package server_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/metrics/metricstest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// TestNegativeHitsRedisHung: a call of 5 refunds (is_negative_hits) and a
// take, Redis hung (paused: it answers nothing), ends within about one
// store timeout, not one per refund and one more for the take: the
// refunds go to the store together and the take gets what is left of the
// same bound. It is answered as a store failure is: the refunds OK
// without figures, each counted in sluice_envoy_negative_hits_failed_total,
// the take as on_error says (deny: denied; local: the failed refunds
// moved the store to memory, where the take is decided).
func TestNegativeHitsRedisHung(t *testing.T) {
	for _, onError := range []string{"deny", "local"} {
		t.Run(onError, func(t *testing.T) {
			const timeout = time.Second
			srv := redistest.StartServer(t)
			rs, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{srv.Addr}, Timeout: timeout})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(rs.Close)
			var st sluice.Store = rs
			if onError == "local" {
				fb := fleet.NewFallback(rs, fleet.FallbackOptions{ExpectedInstances: 1, Probe: rs.Ping})
				t.Cleanup(fb.Close)
				st = fb
			}
			e := startRLS(t, st, writeConf(t, plainConf), envOpts{onError: onError, storeTimeout: timeout})
			const k = 5
			var ds []*descriptorPB
			for i := range k {
				user := fmt.Sprint("u", i)
				e.expect(t, user+"'s hit", []string{"O:O"}, "web", desc("user", user))
				ds = append(ds, withNegative(desc("user", user)))
			}
			ds = append(ds, desc("global", "g"))
			srv.Pause()
			start := time.Now()
			r := e.call(t, "web", 0, ds...)
			took := time.Since(start)
			srv.Resume()
			if took >= 2*timeout {
				t.Errorf("a call of %d refunds and a take with Redis hung took %v; want it within about one store timeout (%v), under %v", k, took, timeout, 2*timeout)
			}
			want, errs := "X:OOOOOX", k+1.0 // each refund and the take
			if onError == "local" {
				want, errs = "O:OOOOOO", k // the take decided in memory
			}
			if codesOf(r) != want {
				t.Errorf("with Redis hung, on_error %s: %s, want %s", onError, codesOf(r), want)
			}
			for i := range k {
				if s := r.Statuses[i]; s.CurrentLimit != nil {
					t.Errorf("refund %d answered with figures %v; want none (the store could not give back)", i, s)
				}
			}
			if s := r.Statuses[k]; onError == "local" && (s.CurrentLimit == nil || s.LimitRemaining != 99) {
				t.Errorf("the take in local mode: %v; want it decided in memory, 99 of 100 left", s)
			}
			m := metricstest.Gather(t, e.reg)
			if got := m[`sluice_envoy_negative_hits_failed_total{descriptor="user",domain="web"}`]; got != k {
				t.Errorf("negative hits the store could not give back: %v, want %d", got, k)
			}
			if got := m["sluice_store_errors_total"]; got != errs {
				t.Errorf("store errors %v, want %v", got, errs)
			}
		})
	}
}

// TestNegativeHitsLandTogether: the refunds of one call, sent to Redis
// together, all land, two of one key included, and before the call's
// takes: a take of a key at its limit, after its refund, is admitted.
func TestNegativeHitsLandTogether(t *testing.T) {
	const timeout = 5 * time.Second
	srv := redistest.StartServer(t)
	rs, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{srv.Addr}, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rs.Close)
	e := startRLS(t, rs, writeConf(t, plainConf), envOpts{storeTimeout: timeout})
	users := []string{"u0", "u1", "u2", "u3", "u4"}
	for _, u := range users {
		e.expect(t, u+" to its limit", []string{"O:O", "O:O", "X:X"}, "web", desc("user", u))
	}
	var ds []*descriptorPB
	for _, u := range users {
		ds = append(ds, withNegative(desc("user", u)))
	}
	ds = append(ds, withNegative(desc("user", "u4")), desc("user", "u0"))
	r := e.call(t, "web", 0, ds...)
	if codesOf(r) != "O:OOOOOOO" {
		t.Fatalf("6 refunds and a take of u0 after its refund: %s, want O:OOOOOOO", codesOf(r))
	}
	for i := range 6 {
		if r.Statuses[i].CurrentLimit == nil {
			t.Errorf("refund %d answered without figures: %v; want the counter after it", i, r.Statuses[i])
		}
	}
	want := map[string]uint32{"u0": 0, "u1": 1, "u2": 1, "u3": 1, "u4": 2}
	for _, u := range users {
		if got := e.remaining(t, "web", "user", u); got != want[u] {
			t.Errorf("%s: %d left after the call, want %d", u, got, want[u])
		}
	}
	m := metricstest.Gather(t, e.reg)
	if got := m[`sluice_envoy_negative_hits_failed_total{descriptor="user",domain="web"}`]; got != 0 {
		t.Errorf("negative hits the store could not give back: %v, want 0", got)
	}
	if got := m[`sluice_envoy_negative_hits_total{descriptor="user",domain="web"}`]; got != 6 {
		t.Errorf("negative hits %v, want 6", got)
	}
}
