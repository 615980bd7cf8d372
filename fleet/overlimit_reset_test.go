package fleet_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// heldStore holds the answer of its next Take once decided is set, until
// gate opens; a Take of the key "down" fails as if the store were down.
type heldStore struct {
	*redisstore.Store
	decided, gate chan struct{}
}

func (s *heldStore) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	if r.Key == "down" {
		return sluice.Decision{}, fmt.Errorf("down: %w", sluice.ErrStoreUnavailable)
	}
	d, err := s.Store.Take(ctx, r)
	if s.decided != nil {
		close(s.decided)
		s.decided = nil
		<-s.gate
	}
	return d, err
}

// TestOverLimitResetDuringRefusal: a refusal the store decided before a
// Reset, and that comes back after it, must not be remembered: the store
// admits the key again after the Reset. Likewise a refusal decided before
// a store failure made the cache forget (the store may have lost the
// count), and back after it.
func TestOverLimitResetDuringRefusal(t *testing.T) {
	for _, forget := range []bool{false, true} {
		t.Run(map[bool]string{false: "Reset", true: "Forget"}[forget], func(t *testing.T) { testRefusalAcross(t, forget) })
	}
}

func testRefusalAcross(t *testing.T, forget bool) {
	srv := redistest.StartServer(t)
	inner := &heldStore{Store: fleet.OpenRedis(t, redisstore.Options{Addrs: []string{srv.Addr}})}
	c := fleet.NewOverLimitCache(inner, fleet.OverLimitOptions{})
	ctx := context.Background()
	r := sluice.Request{Key: "reset", Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(1), Cost: 1, Now: sluicetest.T0}
	if d, err := c.Take(ctx, r); err != nil || !d.Allowed {
		t.Fatalf("first Take = %+v, %v; want allowed", d, err)
	}
	decided, gate := make(chan struct{}), make(chan struct{})
	inner.decided, inner.gate = decided, gate
	refused := make(chan sluice.Decision)
	go func() {
		d, err := c.Take(ctx, r)
		if err != nil {
			t.Error(err)
		}
		refused <- d
	}()
	<-decided // the store refused it; the answer is on its way back
	if forget {
		// The store fails (another key's request sees it), and comes
		// back without its data.
		down := r
		down.Key = "down"
		if _, err := c.Take(ctx, down); err == nil {
			t.Fatal("Take(down) did not fail")
		}
		if err := inner.Store.Reset(ctx, r); err != nil {
			t.Fatal(err)
		}
	} else if err := c.Reset(ctx, r); err != nil {
		t.Fatal(err)
	}
	close(gate)
	if d := <-refused; d.Allowed {
		t.Fatalf("second Take = %+v; want refused (decided before)", d)
	}
	if d, err := c.Take(ctx, r); err != nil || !d.Allowed {
		t.Fatalf("Take after = %+v, %v (cache hits %d); want allowed, as the store admits it", d, err, c.Hits())
	}
}
