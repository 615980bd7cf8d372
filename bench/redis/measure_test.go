package main

import (
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// A call that fails is a decision its caller waited for and did not get:
// its wait stays in the latencies (a timeout is the tail), it is counted
// apart from the decisions, and the share admitted is of the decisions.
func TestMeasureKeepsFailures(t *testing.T) {
	defer func(d time.Duration) { *dur = d }(*dur)
	*dur = 100 * time.Millisecond
	var calls atomic.Int64
	f := func(string) (bool, error) {
		if calls.Add(1)%2 == 0 {
			time.Sleep(2 * time.Millisecond) // a call that times out after a while
			return false, errors.New("redis: i/o timeout")
		}
		return true, nil
	}
	r := measure("failing", f, []string{"k"}, 2, os.Getpid(), 0)
	if r.p99 < 2*time.Millisecond {
		t.Errorf("p99 = %v with half the calls failing after 2ms: the failed calls are not in the latencies", r.p99)
	}
	if n := calls.Load(); int64(r.ops+r.errs) != n || r.errs < r.ops-1 || r.errs > r.ops {
		t.Errorf("%d calls (every other failing): ops %d, errs %d", n, r.ops, r.errs)
	}
	if r.allowedPc != 100 {
		t.Errorf("allowed %.1f%% of the decisions, want 100%% (every answered call admitted)", r.allowedPc)
	}
}
