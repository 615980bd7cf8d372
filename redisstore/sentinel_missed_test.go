package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// TestSentinelMissedSwitch fails over while the Sentinel the store
// listens to for failovers is frozen (SIGSTOP: a hung host, a paused VM),
// its connection up but silent: the +switch-master of the other Sentinel,
// which runs the failover, never reaches the store. The old master lives
// on, demoted to a replica, so no connection of the store breaks either.
// The store must still move to the promoted replica, by asking the
// Sentinels again: before it did, it stayed on the old master (every
// decision READONLY once demoted) until the frozen Sentinel woke up.
func TestSentinelMissedSwitch(t *testing.T) {
	master := redistest.StartServer(t)
	replica := redistest.StartReplica(t, master)
	frozen := redistest.StartSentinelServer(t, master, time.Second, []*redistest.Server{replica})
	other := redistest.StartSentinelServer(t, master, time.Second, []*redistest.Server{replica})
	// The frozen one first: the store subscribes there.
	s := open(t, redisstore.Options{Addrs: []string{frozen.Addr, other.Addr}, Sentinel: "mymaster", Timeout: 200 * time.Millisecond})
	ctx := context.Background()
	if _, err := s.Take(ctx, req("before", 0)); err != nil {
		t.Fatalf("Take through the Sentinels: %v", err)
	}
	frozen.Pause()
	// SENTINEL FAILOVER needs no other Sentinel's vote; it is refused
	// (NOGOODSLAVE) until the Sentinel has a fresh view of the replica.
	deadline := time.Now().Add(time.Minute) // a hang detector: a failover takes seconds
	for {
		_, err := redistest.Do(other.Addr, "SENTINEL", "FAILOVER", "mymaster")
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "NOGOODSLAVE") || time.Now().After(deadline) {
			t.Fatalf("SENTINEL FAILOVER: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // a poll
	}
	// The store has moved when a decision made after the Sentinel named
	// the replica master lands there: the replica, promoted, no longer
	// replicates the old master (before, it had every key).
	var switched time.Time // when the Sentinel first named the replica
	var err error
	for i := 0; ; i++ {
		if switched.IsZero() {
			if m, err := redistest.Do(other.Addr, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster"); err == nil && strings.ReplaceAll(m, "\n", ":") == replica.Addr {
				switched = time.Now()
			}
		}
		key := fmt.Sprint("after-", i)
		if _, err = s.Take(ctx, req(key, 0)); err == nil && !switched.IsZero() {
			if n, _ := redistest.Do(replica.Addr, "EXISTS", s.Key(key)); n == "1" {
				t.Logf("decisions on the promoted replica %v after the Sentinel named it", time.Since(switched))
				break
			}
		}
		if time.Now().After(deadline) {
			role, _ := redistest.Do(master.Addr, "ROLE")
			t.Fatalf("no decision on the promoted replica a minute after the failover (Sentinel named it %v ago; old master's ROLE %q): last Take: %v",
				time.Since(switched), strings.SplitN(role, "\n", 2)[0], err)
		}
		time.Sleep(10 * time.Millisecond) // a steady client
	}
}
