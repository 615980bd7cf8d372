package server_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/metrics/metricstest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// hungCalls is a Redis store that notes its calls' deadlines and errors,
// and holds each Refund until refunds (their number) have come, so that
// they reach the store together or not at all: refunds made in turn
// would each wait out a timeout, and here the first waits for the others
// until the test gives up on it (held: 20 store timeouts).
type hungCalls struct {
	*redisstore.Store
	refunds int
	held    time.Duration
	mu      sync.Mutex
	came    int
	all     chan struct{}
	calls   []hungCall
}

type hungCall struct {
	what     string
	at       time.Time // when it came
	deadline time.Time // its context's; zero for none
	together bool      // a Refund that found all the refunds come
	err      error
}

func (h *hungCalls) note(ctx context.Context, what string, together bool, err error, at time.Time) {
	dl, _ := ctx.Deadline()
	h.mu.Lock()
	h.calls = append(h.calls, hungCall{what, at, dl, together, err})
	h.mu.Unlock()
}

func (h *hungCalls) Refund(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	at := time.Now()
	h.mu.Lock()
	if h.came++; h.came == h.refunds {
		close(h.all)
	}
	h.mu.Unlock()
	together := true
	select {
	case <-h.all:
	case <-time.After(h.held):
		together = false
	}
	d, err := h.Store.Refund(ctx, r)
	h.note(ctx, "refund "+r.Key, together, err, at)
	return d, err
}

func (h *hungCalls) TakeAll(ctx context.Context, rs []sluice.Request, out []sluice.Decision) error {
	at := time.Now()
	err := h.Store.TakeAll(ctx, rs, out)
	h.note(ctx, "take all", true, err, at)
	return err
}

func (h *hungCalls) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	at := time.Now()
	d, err := h.Store.Take(ctx, r)
	h.note(ctx, "take "+r.Key, true, err, at)
	return d, err
}

// TestNegativeHitsRedisHung: a call of 5 refunds (is_negative_hits) and a
// take, Redis hung (paused: it answers nothing), ends within about one
// store timeout, not one per refund and one more for the take: the
// refunds go to the store together (hungCalls holds each until all have
// come) and the take gets what is left of the same bound (its deadline
// at most the timeout after the first refund came), each bounded call
// failing as the store does at its bound; the call as a whole returns
// (within 20 timeouts: a hang detector, not a measure a loaded machine
// can miss). It is answered as a store failure is: the refunds OK
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
			const k = 5
			hc := &hungCalls{Store: rs, refunds: k, held: 20 * timeout, all: make(chan struct{})}
			var st sluice.Store = hc
			if onError == "local" {
				fb := fleet.NewFallback(hc, fleet.FallbackOptions{ExpectedInstances: 1, Probe: rs.Ping})
				t.Cleanup(fb.Close)
				st = fb
			}
			e := startRLS(t, st, writeConf(t, plainConf), envOpts{onError: onError, storeTimeout: timeout})
			var ds []*descriptorPB
			for i := range k {
				user := fmt.Sprint("u", i)
				e.expect(t, user+"'s hit", []string{"O:O"}, "web", desc("user", user))
				ds = append(ds, withNegative(desc("user", user)))
			}
			ds = append(ds, desc("global", "g"))
			hc.mu.Lock()
			hc.calls, hc.came = nil, 0
			hc.mu.Unlock()
			srv.Pause()
			start := time.Now()
			r := e.call(t, "web", 0, ds...)
			took := time.Since(start)
			// The call's store calls, each noted before it returned to
			// the engine: none of what Redis back may bring after.
			hc.mu.Lock()
			calls := hc.calls
			hc.mu.Unlock()
			srv.Resume()
			if took > 20*timeout {
				t.Errorf("a call of %d refunds and a take with Redis hung took %v: hung, past 20 store timeouts (%v)", k, took, timeout)
			}
			checkHungCalls(t, calls, k, onError == "deny", timeout)
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

// checkHungCalls checks the store calls of one Envoy call of k refunds
// and a take made with Redis hung: the k refunds came together, the take
// (when it reached Redis: takeToo) after them with a deadline at most
// timeout after the first refund came, and each failed as a store call
// that Redis does not answer does, ErrStoreUnavailable, the take's
// at its deadline.
func checkHungCalls(t *testing.T, calls []hungCall, k int, takeToo bool, timeout time.Duration) {
	t.Helper()
	want := k
	if takeToo {
		want++
	}
	if len(calls) != want {
		t.Fatalf("%d store calls, want %d (%d refunds and %d take): %+v", len(calls), want, k, want-k, calls)
	}
	var first time.Time
	for _, c := range calls {
		if strings.HasPrefix(c.what, "refund") && (first.IsZero() || c.at.Before(first)) {
			first = c.at
		}
	}
	refunds := 0
	for _, c := range calls {
		if !errors.Is(c.err, sluice.ErrStoreUnavailable) {
			t.Errorf("%s with Redis hung: %v, want ErrStoreUnavailable", c.what, c.err)
		}
		if strings.HasPrefix(c.what, "refund") {
			refunds++
			if !c.together {
				t.Errorf("%s: the others did not come while it waited: the refunds went to the store in turn, a timeout each", c.what)
			}
			continue
		}
		if c.deadline.IsZero() {
			t.Errorf("%s after the refunds: no deadline, want the one store timeout the refunds share (%v)", c.what, timeout)
		} else if c.deadline.After(first.Add(timeout)) {
			t.Errorf("%s after the refunds: deadline %v after the first refund came, want at most the one store timeout they share (%v)", c.what, c.deadline.Sub(first), timeout)
		}
		if !errors.Is(c.err, context.DeadlineExceeded) {
			t.Errorf("%s after the refunds: %v, want its deadline's DeadlineExceeded", c.what, c.err)
		}
	}
	if refunds != k {
		t.Errorf("%d refunds reached the store, want %d", refunds, k)
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
