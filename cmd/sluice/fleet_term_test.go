package main

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestFleetSIGTERMReturnsUnits: a `sluice serve` stopped with SIGTERM
// gives back the lease units it holds and did not spend, so the rest of
// the fleet can admit them in the same window; with SIGKILL they would be
// held by nobody until the window ends.
func TestFleetSIGTERMReturnsUnits(t *testing.T) {
	// Its fixed windows count in hours since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	rs := redistest.StartServer(t)
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
log_level: warn
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s}
  on_error: deny
rules:
  - name: hard
    rate: 10/h
    algorithm: fixed_window
    lease: 5
`, rs.Addr)
	path := writeConfig(t, cfg)
	a, b := startSluiceProc(t, path), startSluiceProc(t, path)
	// a: the first request is decided in Redis, the second reserves 5
	// units and spends one: 6 counted, 2 admitted, 4 held.
	if got := drive(t, []string{a.api}, "hard", "k", 2, 1); got != 2 {
		t.Fatalf("a admitted %d of 2, want 2", got)
	}
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-a.done
	if a.err != nil {
		t.Fatalf("sluice serve after SIGTERM: %v, want exit 0\n%s", a.err, a.logs.String())
	}
	if got := drive(t, []string{b.api}, "hard", "k", 12, 1); got != 8 {
		t.Fatalf("after a's SIGTERM, b admitted %d of 12, want the 8 a did not spend (its 4 held units given back)", got)
	}
}

// TestFleetSyncHitsAtExit: the hits a sync rule admitted on an instance
// and not yet sent (the batch a minute away) go to Redis when it stops
// with SIGTERM: the rest of the fleet admits only what is left. Killed
// with SIGKILL, the instance takes them with it: the fleet admits them a
// second time, on top of the limit (the README says so).
func TestFleetSyncHitsAtExit(t *testing.T) {
	// Its fixed windows count in hours since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	for _, c := range []struct {
		sig  syscall.Signal
		want int // b admits
	}{
		{syscall.SIGTERM, 6},
		{syscall.SIGKILL, 8},
	} {
		t.Run(c.sig.String(), func(t *testing.T) {
			rs := redistest.StartServer(t)
			cfg := fmt.Sprintf(`listen: 127.0.0.1:0
log_level: warn
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s}
rules:
  - name: soft
    rate: 10/h
    algorithm: fixed_window
    sync: 1m
`, rs.Addr)
			path := writeConfig(t, cfg)
			a, b := startSluiceProc(t, path), startSluiceProc(t, path)
			// a: the first two requests are decided in Redis (cold, then
			// the view's read), the next two from the view: 2 hits unsent.
			if got := drive(t, []string{a.api}, "soft", "k", 4, 1); got != 4 {
				t.Fatalf("a admitted %d of 4, want 4", got)
			}
			if err := a.cmd.Process.Signal(c.sig); err != nil {
				t.Fatal(err)
			}
			<-a.done
			if got := drive(t, []string{b.api}, "soft", "k", 12, 1); got != c.want {
				t.Fatalf("after a's %v, b admitted %d of 12, want %d", c.sig, got, c.want)
			}
		})
	}
}

// TestFleetSIGTERMUnitsAfterRefusal: the units a stopping instance gives
// back reach the instances that ask Redis; one that Redis had nothing
// left for refuses on its own (its lease, then its over-limit cache)
// until the give-back's message reaches it, then asks Redis again. The
// fleet admits at most the limit, and at least the limit less the units
// given back (b's requests may all come before the message).
func TestFleetSIGTERMUnitsAfterRefusal(t *testing.T) {
	// Its fixed windows count in hours since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	rs := redistest.StartServer(t)
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
log_level: warn
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s}
rules:
  - name: hard
    rate: 10/h
    algorithm: fixed_window
    lease: 5
`, rs.Addr)
	path := writeConfig(t, cfg)
	a, b := startSluiceProc(t, path), startSluiceProc(t, path)
	// a: 1 decided in Redis, 5 reserved, 1 of them spent: 6 counted, 4 held.
	// b: 1 decided in Redis, then the 3 left reserved and spent: 10
	// counted; then refused on b.
	admitted := drive(t, []string{a.api}, "hard", "k", 2, 1) + drive(t, []string{b.api}, "hard", "k", 6, 1)
	if admitted != 6 {
		t.Fatalf("before a's SIGTERM: %d admitted, want 6", admitted)
	}
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-a.done
	after := drive(t, []string{b.api}, "hard", "k", 6, 1)
	if admitted+after > 10 || admitted+after < 10-4 {
		t.Fatalf("the fleet admitted %d in the window, want between 6 (the limit less a's 4 units given back) and the limit 10", admitted+after)
	}
	t.Logf("b admitted %d of a's 4 units given back (it refuses on its own until told of them)", after)
}
