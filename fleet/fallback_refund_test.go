package fleet_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// cutOff is a real Redis store that a test cuts off: while down is set,
// its calls fail as Redis down would, without reaching it, and Redis
// keeps its counts for when it is back.
type cutOff struct {
	*redisstore.Store
	down atomic.Bool
}

func (s *cutOff) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	if s.down.Load() {
		return sluice.Decision{}, errDown
	}
	return s.Store.Take(ctx, r)
}

func (s *cutOff) TakeAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	if s.down.Load() {
		return errDown
	}
	return s.Store.TakeAll(ctx, rs, ds)
}

func (s *cutOff) Refund(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	if s.down.Load() {
		return sluice.Decision{}, errDown
	}
	return s.Store.Refund(ctx, r)
}

func (s *cutOff) probe(context.Context) error {
	if s.down.Load() {
		return errDown
	}
	return nil
}

// newCutOff returns a Fallback over a cutOff Redis, the Redis store
// itself, and the Fallback's mode changes.
func newCutOff(t *testing.T, instances int) (*fleet.Fallback, *cutOff, chan fleet.Mode) {
	srv := redistest.StartServer(t)
	s := &cutOff{Store: fleet.OpenRedis(t, redisstore.Options{Addrs: []string{srv.Addr}})}
	ch, onChange := modes()
	f := fleet.NewFallback(s, fleet.FallbackOptions{ExpectedInstances: instances, ProbeInterval: 10 * time.Millisecond, Probe: s.probe, OnModeChange: onChange})
	t.Cleanup(f.Close)
	return f, s, ch
}

// outage cuts s off, makes f notice with a request of its own, and waits
// for local mode.
func outage(t *testing.T, f *fleet.Fallback, s *cutOff, ch chan fleet.Mode) {
	t.Helper()
	s.down.Store(true)
	take(t, f, fmt.Sprintf("outage/%d", time.Now().UnixNano()), sluice.PerHour(1000))
	wantMode(t, ch, fleet.ModeLocal)
}

// back lets s answer again and waits for f to be back on it.
func back(t *testing.T, s *cutOff, ch chan fleet.Mode) {
	t.Helper()
	s.down.Store(false)
	wantMode(t, ch, fleet.ModeStore)
}

// redisCount is how many units Redis counts for key's fixed window of l.
func redisCount(t *testing.T, s *cutOff, key string, l sluice.Limit) int64 {
	t.Helper()
	d, err := s.Store.Take(context.Background(), sluice.Request{Key: key, Algorithm: sluice.FixedWindow, Limit: l, Cost: 0, Now: outageNow})
	if err != nil {
		t.Fatal(err)
	}
	return l.Rate - d.Remaining
}

func refund(t *testing.T, f *fleet.Fallback, key string, l sluice.Limit, cost int64) {
	t.Helper()
	if _, err := f.Refund(context.Background(), sluice.Request{Key: key, Algorithm: sluice.FixedWindow, Limit: l, Cost: cost, Now: outageNow}); err != nil {
		t.Fatalf("Refund(%s, %d): %v", key, cost, err)
	}
}

// TestFallbackRefundAfterOutage: units counted in memory during an outage
// and given back once Redis is back go back to memory, which counted them:
// Redis never did, and given back there they would let the fleet admit
// that many more. Units past those go to Redis. Before, the refund went to
// Redis whole, and Redis counted 1 of the 3 it admitted.
func TestFallbackRefundAfterOutage(t *testing.T) {
	f, s, ch := newCutOff(t, 1)
	l := sluice.PerHour(10)
	key := fmt.Sprintf("refundafter/%d", time.Now().UnixNano())
	if n := admitted(t, f, key, l, 3); n != 3 {
		t.Fatalf("Redis up: %d of 3 admitted", n)
	}
	// A key counted in memory by a TakeAll (all admitted), and one in a
	// TakeAll refused as a whole, which counted nothing.
	both, none := key+"/all", key+"/none"
	if n := admitted(t, f, both, l, 1); n != 1 {
		t.Fatalf("Redis up: %d of 1 admitted", n)
	}
	if n := admitted(t, f, none, l, 1); n != 1 {
		t.Fatalf("Redis up: %d of 1 admitted", n)
	}
	outage(t, f, s, ch)
	if n := admitted(t, f, key, l, 2); n != 2 {
		t.Fatalf("local mode: %d of 2 admitted", n)
	}
	ctx := context.Background()
	req := func(key string, l sluice.Limit) sluice.Request {
		return sluice.Request{Key: key, Algorithm: sluice.FixedWindow, Limit: l, Cost: 1, Now: outageNow}
	}
	ds := make([]sluice.Decision, 2)
	if err := f.TakeAll(ctx, []sluice.Request{req(both, l), req(key+"/other", l)}, ds); err != nil || !sluice.AllAllowed(ds) {
		t.Fatalf("local TakeAll: %+v, %v", ds, err)
	}
	if err := f.TakeAll(ctx, []sluice.Request{req(none, l), req(key+"/full", sluice.PerHour(1))}, ds); err != nil || !ds[1].Allowed {
		t.Fatalf("local TakeAll: %+v, %v", ds, err)
	}
	if err := f.TakeAll(ctx, []sluice.Request{req(none, l), req(key+"/full", sluice.PerHour(1))}, ds); err != nil || sluice.AllAllowed(ds) {
		t.Fatalf("local TakeAll past a limit: %+v, %v; want refused", ds, err)
	}
	back(t, s, ch)
	refund(t, f, both, l, 1)
	if got := redisCount(t, s, both, l); got != 1 {
		t.Errorf("after the refund of the unit a TakeAll counted in memory: Redis counts %d, want 1", got)
	}
	refund(t, f, none, l, 2) // 1 counted in memory by the first TakeAll, 1 in Redis
	if got := redisCount(t, s, none, l); got != 0 {
		t.Errorf("after a refund of 2, one counted in memory, one in Redis: Redis counts %d, want 0", got)
	}
	refund(t, f, key, l, 2) // the two admitted in memory
	if got := redisCount(t, s, key, l); got != 3 {
		t.Errorf("after the refund of the 2 units counted in memory: Redis counts %d, want the 3 it admitted", got)
	}
	if d, err := f.Local().Take(context.Background(), sluice.Request{Key: key, Algorithm: sluice.FixedWindow, Limit: l, Now: outageNow}); err != nil || d.Remaining != l.Rate {
		t.Errorf("memory after the refund: %+v, %v; want its 2 units back (%d left)", d, err, l.Rate)
	}
	refund(t, f, key, l, 1) // memory has nothing more of the key's: Redis's
	if got := redisCount(t, s, key, l); got != 2 {
		t.Errorf("after one more unit given back: Redis counts %d, want 2", got)
	}
	if got := f.RefundsDropped(); got != 0 {
		t.Errorf("RefundsDropped = %d, want 0: every unit was given back", got)
	}
}

// TestFallbackRefundDuringOutage: in local mode, units given back that
// memory did not count in this outage were counted in Redis, which does
// not answer: they are dropped (RefundsDropped), not given to memory,
// whose share they would raise. Memory still holds the counts a previous
// outage left in the window; before, the refund gave one of those back and
// the key admitted one more than its share. Units memory counted in this
// outage go back to it.
func TestFallbackRefundDuringOutage(t *testing.T) {
	f, s, ch := newCutOff(t, 3)
	l := sluice.PerHour(6) // the local share: 2
	key := fmt.Sprintf("refundduring/%d", time.Now().UnixNano())
	outage(t, f, s, ch)
	if n := admitted(t, f, key, l, 3); n != 2 {
		t.Fatalf("first outage: %d of 3 admitted, want the share, 2", n)
	}
	back(t, s, ch)
	if n := admitted(t, f, key, l, 1); n != 1 {
		t.Fatalf("Redis back: %d of 1 admitted", n)
	}
	outage(t, f, s, ch)
	refund(t, f, key, l, 1) // the unit counted in Redis
	if n := admitted(t, f, key, l, 1); n != 0 {
		t.Errorf("second outage, after the refund of a unit counted in Redis: %d of 1 admitted, want 0: memory's share is spent", n)
	}
	if got := f.RefundsDropped(); got != 1 {
		t.Errorf("RefundsDropped = %d, want 1", got)
	}
	// A key decided in memory in this outage gets its units back.
	other := key + "/other"
	if n := admitted(t, f, other, l, 3); n != 2 {
		t.Fatalf("other key: %d of 3 admitted, want 2", n)
	}
	refund(t, f, other, l, 1)
	if n := admitted(t, f, other, l, 2); n != 1 {
		t.Errorf("other key after a refund of 1 in the outage: %d of 2 admitted, want 1", n)
	}
	if got := f.RefundsDropped(); got != 1 {
		t.Errorf("RefundsDropped = %d, want still 1", got)
	}
}
