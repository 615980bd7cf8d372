package fleet_test

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/sluicetest"
)

// giveBack is the give-back scenario the fleet tests share: two instances
// over one Redis (PublishRefunds on), one key of 6 units an hour. A takes
// 2 through a lease of chunk 3, so it holds 2 unspent; B takes the 2 left
// and is refused. A then hands its 2 back; once B's listener is told of
// the key, B admits exactly those 2 and is refused the next.
type giveBack struct {
	a, b   sluice.Store  // where A and B take
	la     *fleet.Lease  // A's lease, under a
	back   func() error  // how A hands its lease back
	forgot <-chan string // ns+key of each give-back B's listener was told of

	// Optional checks, each where the test has that piece:
	laStats bool                  // A's lease: 3 granted and 1 spent, then 2 returned
	bCache  *fleet.OverLimitCache // B's cache: remembers the refusal (1 hit), and admits after without a hit
	bLease  *fleet.Lease          // B's lease: refuses on its own before the give-back, asking Redis nothing
}

func (g giveBack) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := sluice.Request{Namespace: "api", Key: "k", Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(6), Cost: 1, Now: sluicetest.T0}
	take := func(who string, s sluice.Store, want bool) {
		t.Helper()
		if d, err := s.Take(ctx, r); err != nil || d.Allowed != want {
			t.Fatalf("%s: Take(%q) = %+v, %v; want Allowed %v", who, r.Key, d, err, want)
		}
	}
	take("A", g.a, true) // the key's first: decided in Redis (1 counted)
	take("A", g.a, true) // reserves 3 (4 counted), spends 1: holds 2
	if st := g.la.Stats(); g.laStats && (st.Granted != 3 || st.Spent != 1) {
		t.Fatalf("A's lease: %+v; want 3 granted, 1 spent", st)
	}
	take("B", g.b, true) // 5
	take("B", g.b, true) // 6
	take("B", g.b, false)
	if g.bCache != nil {
		take("B", g.b, false) // from B's cache
		if got := g.bCache.Hits(); got != 1 {
			t.Fatalf("B's cache hits = %d; want 1 (the refusal remembered)", got)
		}
	}
	if g.bLease != nil {
		calls := g.bLease.Stats().Calls
		take("B", g.bLease, false) // the lease on its own
		if got := g.bLease.Stats().Calls; got != calls {
			t.Fatalf("B's lease asked Redis %d times more; want 0 (it refuses on its own)", got-calls)
		}
	}
	if err := g.back(); err != nil {
		t.Fatalf("A: handing the lease back: %v", err)
	}
	if st := g.la.Stats(); g.laStats && st.Returned != 2 {
		t.Fatalf("A's lease: %+v; want 2 returned", st)
	}
	if got := await(t, g.forgot, "give-back message at B"); got != "apik" {
		t.Fatalf("B was told of a give-back of %q; want %q", got, "apik")
	}
	take("B", g.b, true) // a unit A gave back
	take("B", g.b, true) // the other
	take("B", g.b, false)
	if g.bCache != nil {
		if got := g.bCache.Hits(); got != 1 {
			t.Fatalf("B's cache hits = %d; want still 1", got)
		}
	}
}
