package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/memstore"
)

// TestAdmitOrDeferChargesOthers: a request denied only by a defer rule is
// Deferrable under AdmitOrDefer only if its other enforcing rules all
// allow it, and they are then charged, as for an admitted request; if one
// refuses, the answer is its refusal and none is charged. Admit (an edge
// that does not queue) charges nothing, as before.
func TestAdmitOrDeferChargesOthers(t *testing.T) {
	clk := &clock{t: t0}
	jobs := rule("jobs", sluice.FixedWindow, sluice.PerHour(1), rules.Defer, 0)
	wide := rule("wide", sluice.FixedWindow, sluice.PerHour(3), rules.Reject, 0)
	ip := rule("ip", sluice.FixedWindow, sluice.PerHour(2), rules.Reject, 0)
	e, _ := newEngine(t, "", clk.Now, jobs, wide, ip)
	ms := []rules.Match{{Rule: jobs, Key: "jobs"}, {Rule: wide, Key: "wide"}, {Rule: ip, Key: "ip|1.2.3.4"}}
	remaining := func(i int) int64 {
		t.Helper()
		return e.Check(context.Background(), ms[i].Rule, ms[i].Key, 0).Decision.Remaining
	}
	ctx := context.Background()
	if res := e.AdmitOrDefer(ctx, ms, 1); !res.Allowed {
		t.Fatalf("first: %+v, want allowed", res)
	}
	if res := e.Admit(ctx, ms, 1); res.Allowed || !res.Deferrable {
		t.Fatalf("Admit, jobs spent: allowed %v deferrable %v, want deferrable", res.Allowed, res.Deferrable)
	}
	if w, i := remaining(1), remaining(2); w != 2 || i != 1 {
		t.Fatalf("after Admit's deferrable request: wide %d ip %d remaining, want 2 1 (Admit charges nothing)", w, i)
	}
	res := e.AdmitOrDefer(ctx, ms, 1)
	if res.Allowed || !res.Deferrable || res.DeniedBy != jobs || res.DeniedKey != "jobs" {
		t.Fatalf("AdmitOrDefer, jobs spent: allowed %v deferrable %v denied by %v (%q), want deferrable by jobs", res.Allowed, res.Deferrable, nameOf(res.DeniedBy), res.DeniedKey)
	}
	if w, i := remaining(1), remaining(2); w != 1 || i != 0 {
		t.Fatalf("after a deferred request: wide %d ip %d remaining, want 1 0 (charged as if admitted)", w, i)
	}
	res = e.AdmitOrDefer(ctx, ms, 1)
	if res.Allowed || res.Deferrable {
		t.Fatalf("AdmitOrDefer, ip spent too: allowed %v deferrable %v, want refused, not deferrable", res.Allowed, res.Deferrable)
	}
	if w := remaining(1); w != 1 {
		t.Errorf("after a request ip refused: wide %d remaining, want 1 (all or nothing)", w)
	}
}

// racer runs f before its call number at (from 1) to the store.
type racer struct {
	sluice.Store
	calls, at int
	f         func()
}

func (s *racer) before() {
	if s.calls++; s.calls == s.at {
		s.f()
	}
}

func (s *racer) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	s.before()
	return s.Store.Take(ctx, r)
}

func (s *racer) TakeAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	s.before()
	return s.Store.TakeAll(ctx, rs, ds)
}

// TestAdmitOrDeferRaceRefused: another request spends ip between the
// decision that finds the request deferrable (ip allowing) and the charge
// of its other rules: the charge, all or nothing, is refused by ip, and
// the answer is ip's refusal, wide not charged.
func TestAdmitOrDeferRaceRefused(t *testing.T) {
	clk := &clock{t: t0}
	jobs := rule("jobs", sluice.FixedWindow, sluice.PerHour(1), rules.Defer, 0)
	wide := rule("wide", sluice.FixedWindow, sluice.PerHour(3), rules.Reject, 0)
	ip := rule("ip", sluice.FixedWindow, sluice.PerHour(2), rules.Reject, 0)
	ms := []rules.Match{{Rule: jobs, Key: "jobs"}, {Rule: wide, Key: "wide"}, {Rule: ip, Key: "ip"}}
	mem := memstore.New(memstore.Options{})
	ctx := context.Background()
	st := &racer{Store: mem, at: 3, f: func() { // the first request; the second's decision; its charge
		if d, err := mem.Take(ctx, sluice.Request{Key: "ip", Algorithm: sluice.FixedWindow, Limit: ip.Limit, Cost: 1, Now: clk.Now()}); err != nil || !d.Allowed {
			t.Fatalf("the racing request: %+v, %v; want allowed", d, err)
		}
	}}
	e, err := engine.New(engine.Options{Store: st, Rules: &rules.Set{Rules: []*rules.Rule{jobs, wide, ip}},
		Metrics: metrics.New(prometheus.NewRegistry()), Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	if res := e.AdmitOrDefer(ctx, ms, 1); !res.Allowed {
		t.Fatalf("first: %+v, want allowed", res)
	}
	res := e.AdmitOrDefer(ctx, ms, 1)
	if st.calls < 3 {
		t.Fatalf("%d store calls: the race never ran", st.calls)
	}
	if res.Allowed || res.Deferrable || res.DeniedBy != ip || res.Rule != ip || res.DeniedKey != "ip" || res.Decision.Allowed || res.Decision.RetryAfter <= 0 {
		t.Fatalf("ip spent between decision and charge: allowed %v deferrable %v denied by %v (%q) decision %+v, want ip's refusal, not deferrable",
			res.Allowed, res.Deferrable, nameOf(res.DeniedBy), res.DeniedKey, res.Decision)
	}
	if d := e.Check(ctx, wide, "wide", 0).Decision; d.Remaining != 2 {
		t.Errorf("wide: %d remaining, want 2 (charged by the first request alone)", d.Remaining)
	}
}

// failAfter passes its first n calls to a memstore, then fails.
type failAfter struct {
	sluice.Store
	n int
}

var errDown = errors.New("down")

func (s *failAfter) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	if s.n--; s.n < 0 {
		return sluice.Decision{}, errDown
	}
	return s.Store.Take(ctx, r)
}

func (s *failAfter) TakeAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	if s.n--; s.n < 0 {
		return errDown
	}
	return s.Store.TakeAll(ctx, rs, ds)
}

// TestAdmitOrDeferStoreFails: the store failing when the other rules of a
// deferrable request are charged is answered as on_error says: deny, the
// store's failure (not deferrable); allow, deferrable.
func TestAdmitOrDeferStoreFails(t *testing.T) {
	jobs := rule("jobs", sluice.FixedWindow, sluice.PerHour(1), rules.Defer, 0)
	ip := rule("ip", sluice.FixedWindow, sluice.PerHour(2), rules.Reject, 0)
	ms := []rules.Match{{Rule: jobs, Key: "jobs"}, {Rule: ip, Key: "ip"}}
	for _, onError := range []string{engine.OnErrorDeny, engine.OnErrorAllow} {
		clk := &clock{t: t0}
		st := &failAfter{Store: memstore.New(memstore.Options{}), n: 2} // the first request, the second's decision
		e, err := engine.New(engine.Options{Store: st, Rules: &rules.Set{Rules: []*rules.Rule{jobs, ip}}, OnError: onError,
			Metrics: metrics.New(prometheus.NewRegistry()), Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		if res := e.AdmitOrDefer(context.Background(), ms, 1); !res.Allowed {
			t.Fatalf("%s: first: %+v, want allowed", onError, res)
		}
		res := e.AdmitOrDefer(context.Background(), ms, 1)
		if onError == engine.OnErrorDeny && (res.Allowed || res.Deferrable || !errors.Is(res.StoreErr, errDown) || res.DeniedBy != nil) {
			t.Errorf("deny: %+v, want the store's failure, not deferrable", res)
		}
		if onError == engine.OnErrorAllow && (res.Allowed || !res.Deferrable || res.StoreErr != nil || res.DeniedBy != jobs) {
			t.Errorf("allow: %+v, want deferrable by jobs", res)
		}
		if st.n >= 0 {
			t.Errorf("%s: the failing take was never made (%d calls left)", onError, st.n)
		}
	}
}

// TestNotQueuedGivesBack: a Deferrable request AdmitOrDefer charged its
// other enforcing rules for, and that the edge then did not queue, gets
// those charges back, once; a request AdmitOrDefer charged nothing for
// gives nothing back.
func TestNotQueuedGivesBack(t *testing.T) {
	clk := &clock{t: t0}
	jobs := rule("jobs", sluice.FixedWindow, sluice.PerHour(1), rules.Defer, 0)
	wide := rule("wide", sluice.TokenBucket, sluice.PerHour(3), rules.Reject, 0)
	ip := rule("ip", sluice.SlidingWindowLog, sluice.PerHour(2), rules.Reject, 0)
	e, _ := newEngine(t, "", clk.Now, jobs, wide, ip)
	ms := []rules.Match{{Rule: jobs, Key: "jobs"}, {Rule: wide, Key: "wide"}, {Rule: ip, Key: "ip|1.2.3.4"}}
	remaining := func() (int64, int64) {
		t.Helper()
		return e.Check(context.Background(), wide, "wide", 0).Decision.Remaining, e.Check(context.Background(), ip, "ip|1.2.3.4", 0).Decision.Remaining
	}
	ctx := context.Background()
	if res := e.AdmitOrDefer(ctx, ms, 1); !res.Allowed {
		t.Fatalf("first: %+v, want allowed", res)
	}
	for i := range 3 {
		res := e.AdmitOrDefer(ctx, ms, 1)
		if !res.Deferrable {
			t.Fatalf("#%d: deferrable %v, want deferrable (jobs spent, the others given back)", i, res.Deferrable)
		}
		if w, p := remaining(); w != 1 || p != 0 {
			t.Fatalf("#%d charged: wide %d ip %d remaining, want 1 0", i, w, p)
		}
		e.NotQueued(ctx, &res)
		if w, p := remaining(); w != 2 || p != 1 {
			t.Fatalf("#%d not queued: wide %d ip %d remaining, want 2 1 (as before it)", i, w, p)
		}
		e.NotQueued(ctx, &res) // once only
		if w, p := remaining(); w != 2 || p != 1 {
			t.Fatalf("#%d NotQueued again: wide %d ip %d remaining, want 2 1 (given back once)", i, w, p)
		}
	}
	// Refused by ip (spent by another request): nothing charged, nothing
	// given back.
	other := []rules.Match{{Rule: ip, Key: "ip|1.2.3.4"}}
	if res := e.Admit(ctx, other, 1); !res.Allowed {
		t.Fatalf("ip's last unit: %+v, want allowed", res)
	}
	res := e.AdmitOrDefer(ctx, ms, 1)
	if res.Deferrable {
		t.Fatalf("ip spent: deferrable, want ip's refusal")
	}
	e.NotQueued(ctx, &res)
	if w, p := remaining(); w != 2 || p != 0 {
		t.Errorf("after NotQueued of a refused request: wide %d ip %d remaining, want 2 0 (nothing given back)", w, p)
	}
}

// TestNotQueuedAfterWindowEnded: a charge whose window has ended by the
// time the edge gives it back (a body that trickled in past the window's
// end, then failed) is not given back: a fixed window's refund would
// lower the new window's count, and a sliding window's would drop the
// newest requests' times, units the client spent since, so a client could
// move its allowance into a later window at will. A token bucket's charge
// is still given back (its refill is as if it had never come).
func TestNotQueuedAfterWindowEnded(t *testing.T) {
	clk := &clock{t: t0.Add(59 * time.Minute)} // a minute before the hour's window ends
	jobs := rule("jobs", sluice.FixedWindow, sluice.PerDay(1), rules.Defer, 0)
	fixed := rule("fixed", sluice.FixedWindow, sluice.PerHour(3), rules.Reject, 0)
	logged := rule("log", sluice.SlidingWindowLog, sluice.PerHour(3), rules.Reject, 0)
	bucket := rule("bucket", sluice.TokenBucket, sluice.PerDay(3), rules.Reject, 0)
	e, _ := newEngine(t, "", clk.Now, jobs, fixed, logged, bucket)
	ms := []rules.Match{{Rule: jobs, Key: "jobs"}, {Rule: fixed, Key: "fixed"}, {Rule: logged, Key: "log"}, {Rule: bucket, Key: "bucket"}}
	remaining := func(i int) int64 {
		t.Helper()
		return e.Check(context.Background(), ms[i].Rule, ms[i].Key, 0).Decision.Remaining
	}
	ctx := context.Background()
	if res := e.AdmitOrDefer(ctx, ms, 1); !res.Allowed {
		t.Fatalf("first: %+v, want allowed", res)
	}
	res := e.AdmitOrDefer(ctx, ms, 1) // jobs spent: deferrable, the others charged
	if !res.Deferrable {
		t.Fatalf("second: deferrable %v, want deferrable", res.Deferrable)
	}
	// Past both windows' end (the log's charges at 10:59 leave at 11:59),
	// another client spends units of each.
	clk.Add(61 * time.Minute)
	other := []rules.Match{ms[1], ms[2], ms[3]}
	if r := e.Admit(ctx, other, 1); !r.Allowed {
		t.Fatalf("another request at 12:00: %+v, want allowed", r)
	}
	f, l, b := remaining(1), remaining(2), remaining(3)
	if f != 2 || l != 2 || b != 0 {
		t.Fatalf("before NotQueued: fixed %d log %d bucket %d remaining, want 2 2 0", f, l, b)
	}
	e.NotQueued(ctx, &res)
	if f, l, b := remaining(1), remaining(2), remaining(3); f != 2 || l != 2 || b != 1 {
		t.Errorf("NotQueued after the windows ended: fixed %d log %d bucket %d remaining, want 2 2 1 (the windows' new counts kept, the bucket given its token)", f, l, b)
	}
}

// TestNotQueuedAfterChargeLapsed: a bucket's charge given back after its
// effect may have lapsed gives back more than it took, so it is not given
// back: a leaky bucket place that has left (given back, the queue moves
// up a place nobody left in), or a token that has had time to come back
// (the bucket full again meanwhile, the refund adds it on top). Given
// back while its place has not left, or before a token could come back,
// it is.
func TestNotQueuedAfterChargeLapsed(t *testing.T) {
	clk := &clock{t: t0}
	jobs := rule("jobs", sluice.FixedWindow, sluice.PerDay(1), rules.Defer, 0)
	shaped := rule("shaped", sluice.LeakyBucket, sluice.PerSecond(10).WithBurst(20), rules.Delay, time.Second)
	bucket := rule("bucket", sluice.TokenBucket, sluice.PerSecond(10), rules.Reject, 0)
	e, _ := newEngine(t, "", clk.Now, jobs, shaped, bucket)
	ms := []rules.Match{{Rule: jobs, Key: "jobs"}, {Rule: shaped, Key: "shaped"}, {Rule: bucket, Key: "bucket"}}
	ctx := context.Background()
	if res := e.AdmitOrDefer(ctx, ms, 1); !res.Allowed { // shaped's place leaves now
		t.Fatalf("first: %+v, want allowed", res)
	}
	res := e.AdmitOrDefer(ctx, ms, 1) // jobs spent: shaped's place at 100ms, a token taken
	if !res.Deferrable {
		t.Fatalf("second: deferrable %v, want deferrable", res.Deferrable)
	}
	kept := e.AdmitOrDefer(ctx, ms, 1) // the same: shaped's place at 200ms, a token
	if !kept.Deferrable {
		t.Fatalf("third: deferrable %v, want deferrable", kept.Deferrable)
	}
	e.NotQueued(ctx, &kept) // at once: its token back
	if d := e.Check(ctx, bucket, "bucket", 0).Decision; d.Remaining != 8 {
		t.Fatalf("bucket after a token given back at once: %d remaining, want 8", d.Remaining)
	}
	// At 1s, shaped's place at 100ms has left and the bucket is full
	// again; others take a place and the bucket's tokens.
	clk.Add(time.Second)
	if r := e.Admit(ctx, ms[1:2], 1); !r.Allowed || r.Decision.Delay != 0 {
		t.Fatalf("shaped at 1s: %+v, want admitted at once", r)
	}
	if r := e.Admit(ctx, ms[2:], 10); !r.Allowed {
		t.Fatalf("bucket's 10 tokens at 1s: %+v, want admitted", r)
	}
	e.NotQueued(ctx, &res)
	if r := e.Decide(ctx, ms[1:2], 1); !r.Allowed || r.Decision.Delay != 100*time.Millisecond {
		t.Errorf("shaped after NotQueued of a place that left: delay %v, want 100ms (the place taken at 1s kept)", r.Decision.Delay)
	}
	if d := e.Check(ctx, bucket, "bucket", 0).Decision; d.Remaining != 0 {
		t.Errorf("bucket after NotQueued of a token that came back: %d remaining, want 0", d.Remaining)
	}
}
