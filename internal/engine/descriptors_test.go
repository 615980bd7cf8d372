package engine_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/descriptors"
	"github.com/sluicehq/sluice/internal/engine"
)

const envoyConf = `
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: global
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: soft
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: q1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: q2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
`

func match(t *testing.T, s *descriptors.Set, cost int64, kvs ...[2]string) []engine.Descriptor {
	t.Helper()
	var out []engine.Descriptor
	for _, kv := range kvs {
		e := []descriptors.Entry{{Key: kv[0], Value: kv[1]}}
		var m descriptors.Match
		s.Lookup("d", e, &m)
		d := engine.Descriptor{Rule: m.Rule, Cost: cost}
		if m.Rule != nil {
			d.Key = m.StoreKey(e)
		}
		out = append(out, d)
	}
	return out
}

func decide(t *testing.T, e *engine.Engine, ds []engine.Descriptor) (engine.DescriptorsResult, []engine.DescriptorStatus) {
	st := make([]engine.DescriptorStatus, len(ds))
	return e.DecideDescriptors(context.Background(), ds, st), st
}

// remaining probes a descriptor with cost 0: what is left, without counting.
func remaining(t *testing.T, e *engine.Engine, s *descriptors.Set, kv [2]string) int64 {
	t.Helper()
	_, st := decide(t, e, match(t, s, 0, kv))
	return st[0].Decision.Remaining
}

func TestDecideDescriptorsDeniedConsumesNothing(t *testing.T) {
	s, err := descriptors.Parse("d.yaml", []byte(envoyConf))
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: t0}
	e, _ := newEngine(t, "", clk.Now)
	u, g := [2]string{"user", "alice"}, [2]string{"global", "x"}
	for i := range 2 {
		if res, _ := decide(t, e, match(t, s, 1, u, g)); res.OverLimit {
			t.Fatalf("request %d: over limit, want OK", i+1)
		}
	}
	res, st := decide(t, e, match(t, s, 1, u, g))
	if !res.OverLimit || !st[0].Over || st[1].Over {
		t.Fatalf("third request: over %v, statuses %+v; want over by user only", res.OverLimit, st)
	}
	if got := remaining(t, e, s, g); got != 8 {
		t.Errorf("global remaining after a request denied by user = %d, want 8 (the denied request counted nothing)", got)
	}
	// hits 0 checks without counting.
	if res, _ := decide(t, e, match(t, s, 0, u)); res.OverLimit {
		t.Errorf("a check with hits 0 at the limit is over; want OK (count + 0 <= limit)")
	}
	if got := remaining(t, e, s, g); got != 8 {
		t.Errorf("global remaining after checks = %d, want 8", got)
	}
	// requests_per_unit 0 denies without the store, and counts nothing else.
	if res, st := decide(t, e, match(t, s, 1, [2]string{"blocked", "1"}, g)); !res.OverLimit || st[0].Asked || st[1].Asked {
		t.Errorf("blocked: over %v, asked %v/%v; want over without asking the store", res.OverLimit, st[0].Asked, st[1].Asked)
	}
	if got := remaining(t, e, s, g); got != 8 {
		t.Errorf("global remaining after a blocked request = %d, want 8", got)
	}
}

func TestDecideDescriptorsShadowAndQuota(t *testing.T) {
	s, err := descriptors.Parse("d.yaml", []byte(envoyConf))
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: t0}
	e, _ := newEngine(t, "", clk.Now)
	sh, g := [2]string{"soft", "a"}, [2]string{"global", "y"}
	decide(t, e, match(t, s, 1, sh))
	res, st := decide(t, e, match(t, s, 1, sh, g))
	if res.OverLimit || !st[0].Over || st[1].Over {
		t.Fatalf("shadow over: overall over %v, statuses %+v; want OK with the shadow descriptor over", res.OverLimit, st)
	}
	if got := remaining(t, e, s, g); got != 9 {
		t.Errorf("global remaining = %d, want 9: the request a shadow descriptor let through is counted", got)
	}

	q1, q2 := [2]string{"q1", "a"}, [2]string{"q2", "a"}
	if res, _ := decide(t, e, match(t, s, 1, q1, q2)); res.OverLimit {
		t.Fatalf("first quota request over")
	}
	res, st = decide(t, e, match(t, s, 1, q1, q2))
	if res.OverLimit || !st[0].Over || st[1].Over {
		t.Fatalf("one quota descriptor over: overall %v, statuses %+v; want OK", res.OverLimit, st)
	}
	if got := remaining(t, e, s, q2); got != 1 {
		t.Errorf("q2 remaining = %d, want 1 (counted twice)", got)
	}
	decide(t, e, match(t, s, 1, q2))
	if res, _ := decide(t, e, match(t, s, 1, q1, q2)); !res.OverLimit {
		t.Errorf("every quota descriptor over: OK, want over limit")
	}
}

type brokenStore struct{}

var errBroken = errors.New("down")

func (brokenStore) Take(context.Context, sluice.Request) (sluice.Decision, error) {
	return sluice.Decision{}, errBroken
}
func (brokenStore) TakeAll(context.Context, []sluice.Request, []sluice.Decision) error {
	return errBroken
}

func TestDecideDescriptorsStoreDown(t *testing.T) {
	s, _ := descriptors.Parse("d.yaml", []byte(envoyConf))
	for _, tc := range []struct {
		onError string
		over    bool
	}{{"allow", false}, {"deny", true}} {
		e, err := engine.New(engine.Options{Store: brokenStore{}, OnError: tc.onError})
		if err != nil {
			t.Fatal(err)
		}
		res, _ := decide(t, e, match(t, s, 1, [2]string{"user", "a"}))
		if !errors.Is(res.StoreErr, errBroken) || res.OverLimit != tc.over {
			t.Errorf("on_error %s: %+v, want the store error and over limit %v", tc.onError, res, tc.over)
		}
	}
}
