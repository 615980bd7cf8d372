package sluice_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// Capacity is what each algorithm admits at once on a key at rest, and
// the Remaining of that key: a request of that cost is admitted, one unit
// more is refused for good (RetryAfter Never).
func TestCapacity(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	for _, a := range sluice.Algorithms() {
		for _, l := range []sluice.Limit{
			{Rate: 10, Period: time.Second},
			{Rate: 10, Period: time.Minute, Burst: 25},
			{Rate: 3, Period: time.Hour, Burst: 1},
		} {
			if refusesBurst(a, l) {
				continue // a window takes no burst
			}
			c := a.Capacity(l)
			var st sluice.State
			d, _, err := a.Take(&st, l, now, 0)
			if err != nil {
				t.Fatal(err)
			}
			if d.Remaining != c {
				t.Errorf("%v %v: at rest Remaining %d, Capacity %d", a, l, d.Remaining, c)
			}
			if d, _, err = a.Take(&st, l, now, c+1); err != nil || d.Allowed || d.RetryAfter != sluice.Never {
				t.Errorf("%v %v: cost Capacity+1 = %d: %+v, %v; want refused with RetryAfter Never", a, l, c+1, d, err)
			}
			if d, _, err = a.Take(&st, l, now, c); err != nil || !d.Allowed {
				t.Errorf("%v %v: cost Capacity = %d: %+v, %v; want admitted", a, l, c, d, err)
			}
		}
	}
}
