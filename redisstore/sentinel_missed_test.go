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
// The store must still move to the promoted replica: before, it stayed on
// the old master (every decision READONLY once demoted) until the frozen
// Sentinel woke up.
func TestSentinelMissedSwitch(t *testing.T) {
	master := redistest.StartServer(t)
	replica := redistest.StartReplica(t, master)
	frozen := redistest.StartSentinelServer(t, master, time.Second, []*redistest.Server{replica})
	other := redistest.StartSentinelServer(t, master, time.Second, []*redistest.Server{replica})
	// The frozen one first: the store listens there.
	s := open(t, redisstore.Options{Addrs: []string{frozen.Addr, other.Addr}, Sentinel: "mymaster", Timeout: 200 * time.Millisecond})
	// Until it answers: the 200ms bounds the calls made during the
	// failover, and a loaded machine can hold Redis that long.
	untilOK(t, "Take through the Sentinels", func() error { _, err := s.Take(context.Background(), req("before", 0)); return err })
	frozen.Pause()
	deadline := time.Now().Add(2 * time.Minute) // a hang detector: a failover takes seconds
	named := failover(t, other.Addr, replica, deadline)
	onReplica(t, s, replica, deadline)
	t.Logf("decisions on the promoted replica %v after the Sentinel named it", time.Since(named))
}

// TestSentinelCutOff fails over while the store cannot reach its one
// Sentinel (every connection to it closed, new ones refused): once it
// can, the store asks it again and moves to the promoted replica.
func TestSentinelCutOff(t *testing.T) {
	master := redistest.StartServer(t)
	replica := redistest.StartReplica(t, master)
	sentinel := redistest.StartSentinelFor(t, master, time.Second, []*redistest.Server{replica})
	gate := redistest.NewGate(t, sentinel)
	s := open(t, redisstore.Options{Addrs: []string{gate.Addr}, Sentinel: "mymaster", Timeout: 200 * time.Millisecond})
	// Until it answers, as in TestSentinelMissedSwitch.
	untilOK(t, "Take through the Sentinel", func() error { _, err := s.Take(context.Background(), req("before", 0)); return err })
	gate.Shut()
	deadline := time.Now().Add(2 * time.Minute) // a hang detector
	failover(t, sentinel, replica, deadline)
	gate.Open()
	opened := time.Now()
	onReplica(t, s, replica, deadline)
	t.Logf("decisions on the promoted replica %v after the Sentinel was reachable again", time.Since(opened))
}

// failover asks the Sentinel at addr for a failover (SENTINEL FAILOVER,
// which needs no other Sentinel's vote) and waits until it names replica
// the master; it returns when it first did. The Sentinel refuses
// (NOGOODSLAVE) until its view of the replica is fresh, and may abort a
// failover it took, its view stale a moment later: it is asked again
// whenever no failover is in progress.
func failover(t *testing.T, addr string, replica *redistest.Server, deadline time.Time) time.Time {
	t.Helper()
	start, taken := time.Now(), 0
	for {
		m, err := redistest.Do(addr, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster")
		if err == nil && strings.ReplaceAll(m, "\n", ":") == replica.Addr {
			t.Logf("the Sentinel named the replica %v after the failover was first asked (failovers taken: %d)", time.Since(start), taken)
			return time.Now()
		}
		if info, err := redistest.Do(addr, "SENTINEL", "MASTER", "mymaster"); err == nil && !strings.Contains(info, "failover_in_progress") {
			_, err := redistest.Do(addr, "SENTINEL", "FAILOVER", "mymaster")
			if err != nil && !strings.Contains(err.Error(), "NOGOODSLAVE") {
				t.Fatalf("SENTINEL FAILOVER: %v", err)
			}
			if err == nil {
				taken++
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Sentinel %s names %q, %v, not the replica %s, %v after the failover was first asked", addr, m, err, replica.Addr, time.Since(start))
		}
		time.Sleep(5 * time.Millisecond) // a poll
	}
}

// onReplica waits until a decision of s lands on replica, named master
// already: promoted, it no longer replicates the old master (before, it
// had every key).
func onReplica(t *testing.T, s *redisstore.Store, replica *redistest.Server, deadline time.Time) {
	t.Helper()
	for i := 0; ; i++ {
		key := fmt.Sprint("after-", i)
		_, err := s.Take(context.Background(), req(key, 0))
		if err == nil {
			if n, _ := redistest.Do(replica.Addr, "EXISTS", s.Key(key)); n == "1" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no decision on the promoted replica by the deadline: last Take: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // a steady client
	}
}

// TestSentinelHungAtStart starts a store whose first Sentinel is frozen
// (it accepts connections, the kernel completing them, and never
// answers): New must go on to the next Sentinel and connect. Before, the
// handshake with the frozen one took the whole of New's bound (the
// timeout, at least a second), so New failed, and the daemon, retrying,
// never connected. The timeout is 3s, so that each Sentinel's share of
// New's bound (a third with two Sentinels: 1s) is what a call to Redis
// gets in these tests (upTimeout): the frozen one takes it all, and the
// live one's handshake must fit in its own, which a loaded machine can
// miss at the default's 50ms (1 run in 40 with -cpu 1 beside other
// tests). What each Sentinel gets at the default is
// TestSentinelDialerShares's. New is tried as the daemon does, again when
// it fails, up to 5 times, while the frozen one, before, failed every try.
func TestSentinelHungAtStart(t *testing.T) {
	master := redistest.StartServer(t)
	hung := redistest.StartSentinelServer(t, master, 5*time.Second, nil)
	other := redistest.StartSentinel(t, master)
	hung.Pause()
	const timeout = 3 * time.Second
	start := time.Now()
	var (
		s   *redisstore.Store
		err error
	)
	for try := 1; ; try++ {
		s, err = redisstore.New(context.Background(), redisstore.Options{Addrs: []string{hung.Addr, other}, Sentinel: "mymaster", Timeout: timeout})
		if err == nil {
			break
		}
		if try == 5 {
			t.Fatalf("New with timeout %v, the first Sentinel hung: failed %d times, last: %v", timeout, try, err)
		}
		t.Logf("timeout %v: try %d failed: %v", timeout, try, err)
	}
	t.Logf("timeout %v: connected in %v", timeout, time.Since(start))
	// The store decides on the master it found; its first Take (a
	// connection, the script loaded) is tried as often as New.
	for try := 1; ; try++ {
		if _, err = s.Take(context.Background(), req(fmt.Sprint("hung-", timeout), 0)); err == nil {
			break
		}
		if try == 5 {
			s.Close()
			t.Fatalf("Take with timeout %v, the first Sentinel hung: failed %d times, last: %v", timeout, try, err)
		}
		t.Logf("timeout %v: Take %d failed: %v", timeout, try, err)
	}
	s.Close()
}
