package engine_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/descriptors"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/hotkeys"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/metrics/metricstest"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestAdmitClientGone: a request whose client has gone before the store
// answered is not a store failure. Under on_error allow it must not come
// back allowed (the proxy would forward it upstream uncounted: a client
// could pass any limit by closing its connection right after a request),
// but ended, with the context's error, as when the client leaves during a
// wait; and neither it nor its shadow rules count as store errors.
func TestAdmitClientGone(t *testing.T) {
	enforce := rule("enforce", sluice.FixedWindow, sluice.PerMinute(1), rules.Reject, 0)
	shadow := rule("would-be", sluice.FixedWindow, sluice.PerMinute(1), rules.Shadow, 0)
	e, reg := newContextEngine(t, engine.OnErrorAllow, enforce, shadow)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ms := []rules.Match{{Rule: enforce, Key: "e"}, {Rule: shadow, Key: "s"}}
	res := e.Admit(ctx, ms, 1)
	if res.Allowed || !errors.Is(res.Err, context.Canceled) || res.StoreErr != nil {
		t.Errorf("Admit for a gone client: allowed %v, Err %v, StoreErr %v; want denied, context.Canceled, no store error", res.Allowed, res.Err, res.StoreErr)
	}
	got := metricstest.Gather(t, reg)
	if got["sluice_store_errors_total"] != 0 || got[`sluice_store_fallback_total{policy="allow"}`] != 0 {
		t.Errorf("metrics after a gone client: %v; want no store error, no fallback", got)
	}
	// A live client is decided as before, and its request counted.
	if res := e.Admit(context.Background(), ms, 1); !res.Allowed || res.Decision.Remaining != 0 {
		t.Errorf("Admit for a live client: allowed %v remaining %d, want allowed, 0 left", res.Allowed, res.Decision.Remaining)
	}
}

// TestCheckReportDescriptorsClientGone: the decision API's and the Envoy
// service's paths treat a client that went away before the store answered
// as Admit does: the result carries the context's error, is not allowed
// (on_error allow must not answer a gone client "allowed", nor Envoy's
// proxy forward its request uncounted), and nothing counts as a store
// error or a fallback.
func TestCheckReportDescriptorsClientGone(t *testing.T) {
	enforce := rule("enforce", sluice.FixedWindow, sluice.PerMinute(1), rules.Reject, 0)
	shadow := rule("would-be", sluice.FixedWindow, sluice.PerMinute(1), rules.Shadow, 0)
	set, err := descriptors.Parse("d.yaml", []byte(envoyConf))
	if err != nil {
		t.Fatal(err)
	}
	e, reg := newContextEngine(t, engine.OnErrorAllow, enforce, shadow)
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		name string
		call func(ctx context.Context) engine.Result
	}{
		{"Check enforce", func(ctx context.Context) engine.Result { return e.Check(ctx, enforce, "k", 1) }},
		{"Check shadow", func(ctx context.Context) engine.Result { return e.Check(ctx, shadow, "k", 1) }},
		{"Report enforce", func(ctx context.Context) engine.Result { return e.Report(ctx, enforce, "r", 1) }},
		{"Report shadow", func(ctx context.Context) engine.Result { return e.Report(ctx, shadow, "r", 1) }},
	} {
		res := c.call(gone)
		if res.Allowed || !errors.Is(res.Err, context.Canceled) || res.StoreErr != nil {
			t.Errorf("%s for a gone client: allowed %v, Err %v, StoreErr %v; want not allowed, context.Canceled, no store error", c.name, res.Allowed, res.Err, res.StoreErr)
		}
		if res := c.call(context.Background()); !res.Allowed || res.Err != nil || res.StoreErr != nil {
			t.Errorf("%s for a live client: allowed %v, Err %v, StoreErr %v; want allowed (the gone client counted nothing)", c.name, res.Allowed, res.Err, res.StoreErr)
		}
	}
	ds := match(t, set, 1, [2]string{"user", "alice"})
	st := make([]engine.DescriptorStatus, len(ds))
	if res := e.DecideDescriptors(gone, ds, st); !errors.Is(res.Err, context.Canceled) || res.StoreErr != nil || !res.OverLimit {
		t.Errorf("DecideDescriptors for a gone client: Err %v, StoreErr %v, over %v; want context.Canceled, no store error, over", res.Err, res.StoreErr, res.OverLimit)
	}
	rep, err := descriptors.Parse("r.yaml", []byte("domain: d\ndescriptors:\n  - key: tokens\n    report: true\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"))
	if err != nil {
		t.Fatal(err)
	}
	ds = match(t, rep, 3, [2]string{"tokens", "t"})
	if res := e.DecideDescriptors(gone, ds, st[:1]); !errors.Is(res.Err, context.Canceled) || res.StoreErr != nil {
		t.Errorf("DecideDescriptors (report: true) for a gone client: Err %v, StoreErr %v; want context.Canceled, no store error", res.Err, res.StoreErr)
	}
	got := metricstest.Gather(t, reg)
	if got["sluice_store_errors_total"] != 0 || got[`sluice_store_fallback_total{policy="allow"}`] != 0 {
		t.Errorf("metrics after gone clients: store errors %v, fallbacks %v; want none", got["sluice_store_errors_total"], got[`sluice_store_fallback_total{policy="allow"}`])
	}
}

// TestDeadlineIsAStoreFailure: a call whose deadline passed before the
// store answered (Envoy's gRPC timeout, shorter than store.redis.timeout)
// is the store being too slow for its client, not a client that hung up:
// it stays a store error, answered as on_error says, so that the metrics
// show the store is slower than the clients allow.
func TestDeadlineIsAStoreFailure(t *testing.T) {
	set, err := descriptors.Parse("d.yaml", []byte(envoyConf))
	if err != nil {
		t.Fatal(err)
	}
	enforce := rule("enforce", sluice.FixedWindow, sluice.PerMinute(1), rules.Reject, 0)
	reg := prometheus.NewRegistry()
	e, err := engine.New(engine.Options{Store: sluicetest.ContextStore(memstore.New(memstore.Options{})), Rules: &rules.Set{Rules: []*rules.Rule{enforce}},
		OnError: engine.OnErrorAllow, Metrics: metrics.New(reg)})
	if err != nil {
		t.Fatal(err)
	}
	late, cancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancel()
	ds := match(t, set, 1, [2]string{"user", "alice"})
	st := make([]engine.DescriptorStatus, len(ds))
	if res := e.DecideDescriptors(late, ds, st); res.Err != nil || res.StoreErr == nil || res.OverLimit {
		t.Errorf("DecideDescriptors past its deadline: Err %v, StoreErr %v, over %v; want a store error answered allowed (on_error allow)", res.Err, res.StoreErr, res.OverLimit)
	}
	if res := e.Check(late, enforce, "k", 1); res.Err != nil || res.StoreErr == nil || !res.Allowed {
		t.Errorf("Check past its deadline: Err %v, StoreErr %v, allowed %v; want a store error answered allowed", res.Err, res.StoreErr, res.Allowed)
	}
	if got := metricstest.Gather(t, reg)["sluice_store_errors_total"]; got != 2 {
		t.Errorf("sluice_store_errors_total after two calls past their deadline = %v, want 2", got)
	}
}

// TestClientGoneCountsAsHot: a request whose client went away before the
// store answered still counts in its rule's hot-key summary, as a denied
// one does. The summary measures the decisions asked of a key (the load
// on its counter, what shards: auto spreads, and what an operator looks
// for in GET /v1/hotkeys), not what came of them: the request was decided
// up to the store, whose call was usually made, and a client that
// floods a key and hangs up each time is just the key to show.
func TestClientGoneCountsAsHot(t *testing.T) {
	enforce := rule("enforce", sluice.FixedWindow, sluice.PerMinute(100), rules.Reject, 0)
	hot := hotkeys.NewSet(hotkeys.Options{Sample: 1, Stripes: 2}, 0, 0)
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	e, err := engine.New(engine.Options{Store: sluicetest.ContextStore(memstore.New(memstore.Options{})), Rules: &rules.Set{Rules: []*rules.Rule{enforce}},
		OnError: engine.OnErrorAllow, Metrics: metrics.New(prometheus.NewRegistry()), HotKeys: hot, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	for range 3 {
		if res := e.Check(gone, enforce, "left", 1); !errors.Is(res.Err, context.Canceled) {
			t.Fatalf("Check for a gone client: Err %v, want context.Canceled", res.Err)
		}
		if res := e.Admit(gone, []rules.Match{{Rule: enforce, Key: "left"}}, 1); !errors.Is(res.Err, context.Canceled) {
			t.Fatalf("Admit for a gone client: Err %v, want context.Canceled", res.Err)
		}
	}
	e.Check(context.Background(), enforce, "stayed", 2)
	top := hot.Top(10, c.Now())
	if len(top) != 1 || len(top[0].Keys) != 2 {
		t.Fatalf("hot keys after 6 gone and 1 live decision: %+v; want rule enforce with keys left and stayed", top)
	}
	k := top[0].Keys
	if k[0].Key != "left" || k[1].Key != "stayed" || math.Abs(k[0].Rate/k[1].Rate-3) > 1e-9 {
		t.Errorf("hot keys: %s %v, %s %v; want left at 3× stayed (6 gone decisions of cost 1, 1 live of cost 2)", k[0].Key, k[0].Rate, k[1].Key, k[1].Rate)
	}
}
