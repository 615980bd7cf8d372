package fleet

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestWithinNeverDecidedLocally guards an assumption TakeWithin rests on:
// Sync and Lease pass a bounded request (a leaky bucket's) to the shared
// store's TakeWithin, which keeps the bound, only because they never decide
// such a request locally (redisstore.Shareable leaves the leaky bucket
// out). Should Shareable ever admit it, their Take would decide it locally
// while TakeWithin still passed it through blindly: one key decided in two
// places, and the bound kept by neither. For every algorithm and a spread
// of limits, a request TakeWithin bounds must not be one Sync or Lease
// decides locally.
func TestWithinNeverDecidedLocally(t *testing.T) {
	limits := []sluice.Limit{
		sluice.PerSecond(10),
		sluice.PerSecond(10).WithBurst(20),
		sluice.PerMinute(100).WithSegments(1),
		sluice.PerMinute(100).WithSegments(4),
		{Rate: 1, Period: time.Hour},
	}
	local := []struct {
		name    string
		applies func(*sluice.Request) bool
	}{
		{"Sync", (&Sync{}).applies},
		{"Lease", (&Lease{}).applies},
	}
	checked := 0
	for _, alg := range sluice.Algorithms() {
		for _, l := range limits {
			r := sluice.Request{Key: "k", Algorithm: alg, Limit: l, Cost: 1}
			if !bounded(&r) {
				continue
			}
			checked++
			for _, d := range local {
				if d.applies(&r) {
					t.Errorf("%s decides %s under %+v locally, yet its TakeWithin passes it to the shared store: the bound would not hold", d.name, alg, l)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no algorithm is bounded by TakeWithin: the test checks nothing")
	}
}
