package daemon

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestLeaseUnitsGivenBackReachRefusingInstance: two daemons with a lease
// rule over one Redis. b takes what a left and is refused: Redis has
// nothing left, and b's lease (and its over-limit cache) refuse on their
// own until the window ends. a stops and hands back its 4 unspent units;
// their give-back is published, and b, told of it, asks Redis again and
// admits them: the fleet admits its limit, 10. b used to refuse them
// until the end of the hour (6 admitted). The wait is for b admitting,
// failing after a minute.
func TestLeaseUnitsGivenBackReachRefusingInstance(t *testing.T) {
	// Its fixed windows count in hours since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	rs := redistest.StartServer(t)
	conf := fmt.Sprintf("listen: 127.0.0.1:0\nstore:\n  type: redis\n  redis: {addrs: [%s], timeout: 2s}\nrules:\n  - name: hard\n    rate: 10/h\n    algorithm: fixed_window\n    lease: 5\n", rs.Addr)
	a, b := startDaemon(t, conf), startDaemon(t, conf)
	// a: 1 decided in Redis, 5 reserved, 1 of them spent: 6 counted, 4
	// held. b: 1 decided in Redis, the 3 left reserved and spent, then
	// refused.
	if n := allowedOf(t, a.api, "hard", "k", 2) + allowedOf(t, b.api, "hard", "k", 6); n != 6 {
		t.Fatalf("before a stops: %d admitted, want 6", n)
	}
	if n := allowedOf(t, b.api, "hard", "k", 3); n != 0 {
		t.Fatalf("b once refused: %d of 3 admitted, want 0", n)
	}
	if err := a.stop(); err != nil {
		t.Fatalf("a: stop: %v", err)
	}
	deadline := time.Now().Add(time.Minute)
	refused := 0
	for allowedOf(t, b.api, "hard", "k", 1) == 0 {
		refused++
		if time.Now().After(deadline) {
			t.Fatalf("b still refuses the units a gave back (%d refusals since)", refused)
		}
		time.Sleep(time.Millisecond)
	}
	if n := allowedOf(t, b.api, "hard", "k", 5); n != 3 {
		t.Fatalf("b after the first unit a gave back: %d of 5 admitted, want the other 3", n)
	}
}
