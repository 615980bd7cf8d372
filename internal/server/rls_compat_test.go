package server_test

import (
	"math"
	"testing"

	"github.com/sluicehq/sluice/memstore"
)

// Corners of the reference service's semantics that its README's examples
// do not show, each as the reference service answers it.

// TestReplacedUnlimitedStaysUnlimited: the reference service marks an
// unlimited descriptor before it drops the limits named in replaces, so an
// unlimited limit that another matched limit replaces still answers OK
// with 4294967295 remaining.
func TestReplacedUnlimitedStaysUnlimited(t *testing.T) {
	e := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, `domain: p
descriptors:
  - key: free
    rate_limit: {unlimited: true, name: freebie}
  - key: paid
    rate_limit: {unit: minute, requests_per_unit: 3, replaces: [{name: freebie}]}
`), envOpts{})
	r := e.call(t, "p", 0, desc("free", "x"), desc("paid", "x"))
	if codesOf(r) != "O:OO" || r.Statuses[0].LimitRemaining != math.MaxUint32 || r.Statuses[0].CurrentLimit != nil {
		t.Errorf("unlimited replaced: %s %v, want OK with %d remaining and no limit", codesOf(r), r.Statuses[0], uint32(math.MaxUint32))
	}
	if r.Statuses[1].LimitRemaining != 2 {
		t.Errorf("the replacing limit: %v, want 2 of 3 left", r.Statuses[1])
	}
}
