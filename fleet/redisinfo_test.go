package fleet_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// BenchmarkFleet's redis-cmds/op leaves out its own INFO calls: between
// its readings before and after a run, one command of the run's counts
// as one.
func TestFleetBenchCountsOnlyTheRunsCommands(t *testing.T) {
	srv := redistest.StartServer(t)
	before := readRedis(t, srv.Addr)
	if _, err := redistest.Do(srv.Addr, "PING"); err != nil { // the run: one command
		t.Fatal(err)
	}
	after := readRedis(t, srv.Addr)
	if got := after.cmds - before.cmds - redisReadINFOs; got != 1 {
		t.Fatalf("the run's commands as BenchmarkFleet counts them (less its INFO calls): %d, want 1", got)
	}
	if got := after.scripts - before.scripts; got != 0 {
		t.Fatalf("script calls: %d, want 0", got)
	}
}
