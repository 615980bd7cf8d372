package fleet_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestFallbackLedgerFullSweepsItself: the units memory counted per key,
// noted for refunds, are bounded by MaxKeys; once a key's count is at
// rest its note is worth nothing, and a full ledger sweeps those as new
// keys arrive, as the memory store does, whether or not Sweep is called.
// Before, a ledger part at its bound below the size at which it sweeps
// itself (any MaxKeys under 1024) never did: once filled, no key's units
// were noted again, and a refund in local mode of units memory counted
// was dropped rather than given back to memory.
func TestFallbackLedgerFullSweepsItself(t *testing.T) {
	down := func(context.Context) error { return errDown }
	f := fleet.NewFallback(memstore.New(memstore.Options{}), fleet.FallbackOptions{MaxKeys: 64, StartLocal: true, ProbeInterval: time.Hour, Probe: down})
	t.Cleanup(f.Close)
	ctx := context.Background()
	limit := sluice.PerSecond(10)
	for round, now := range []time.Time{sluicetest.T0, sluicetest.T0.Add(time.Hour)} {
		for k := range 256 { // four times the bound: every part of the ledger full
			r := sluice.Request{Key: fmt.Sprintf("ledgerfull/%d/%d", round, k), Algorithm: sluice.FixedWindow, Limit: limit, Cost: 1, Now: now}
			if d, err := f.Take(ctx, r); err != nil || !d.Allowed {
				t.Fatalf("Take = %+v, %v", d, err)
			}
			if round == 0 {
				continue
			}
			// An hour on, the first round's counts are at rest: this
			// key's unit is noted, and its refund goes back to memory.
			if _, err := f.Refund(ctx, r); err != nil {
				t.Fatalf("Refund: %v", err)
			}
			if n := f.RefundsDropped(); n != 0 {
				t.Fatalf("key %d of the second round: RefundsDropped = %d, want 0: a unit memory counted was not noted", k, n)
			}
		}
	}
}
