package fleet_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// failoverResult is what one Sentinel failover did to decisions.
type failoverResult struct {
	stopped     time.Duration // from the kill to the first decision on the promoted replica
	promoted    time.Duration // from the kill to the replica's promotion (the Sentinel's part)
	failed      int           // plain store calls that failed meanwhile
	fallbackErr int           // calls through the Fallback that failed (want 0)
	local       uint64        // decisions the Fallback made in memory
}

// failover starts a master, a replica and a Sentinel (master down after
// downAfter), decides on the master through the Sentinel, kills the master
// with SIGKILL and decides until decisions resume on the promoted replica.
// Two deciders run side by side on one store (whose calls timeout bounds;
// 0: fleet.OpenRedis's generous bound): the plain store (whose errors
// measure the stop) and a Fallback over an OverLimitCache over it (which
// must answer every request). It checks that the replica now holds the
// keys. Each wait is for a condition, bounded by a minute.
func failover(tb testing.TB, downAfter, timeout time.Duration) failoverResult {
	tb.Helper()
	master := redistest.StartServer(tb)
	replica := redistest.StartReplica(tb, master)
	sentinel := redistest.StartSentinelFor(tb, master, downAfter, []*redistest.Server{replica})
	rs := fleet.OpenRedis(tb, redisstore.Options{Addrs: []string{sentinel}, Sentinel: "mymaster", Timeout: timeout, RedisTime: true})
	fb := fleet.NewFallback(fleet.NewOverLimitCache(rs, fleet.OverLimitOptions{}), fleet.FallbackOptions{
		ExpectedInstances: 2, Probe: rs.Ping, ProbeInterval: 10 * time.Millisecond,
	})
	tb.Cleanup(fb.Close)
	ctx := context.Background()
	l := sluice.PerSecond(1000)
	req := func(key string) sluice.Request {
		return sluice.Request{Key: key, Algorithm: sluice.TokenBucket, Limit: l, Cost: 1, Now: time.Now()}
	}
	if _, err := rs.Take(ctx, req("before")); err != nil {
		tb.Fatalf("Take on the master through the Sentinel: %v", err)
	}
	var (
		res  failoverResult
		done atomic.Bool
		wg   sync.WaitGroup
	)
	wg.Add(1)
	go func() { // through the Fallback: never an error
		defer wg.Done()
		for i := 0; !done.Load(); i++ {
			if _, err := fb.Take(ctx, req(fmt.Sprint("fb", i%50))); err != nil {
				res.fallbackErr++
			}
			time.Sleep(time.Millisecond) // a steady client, not a busy loop
		}
	}()
	kill := time.Now()
	master.Kill()
	deadline := kill.Add(time.Minute) // a hang detector: a failover takes seconds
	promoted := make(chan time.Duration, 1)
	watching := make(chan struct{})
	defer close(watching)
	go func() { // when the Sentinel has promoted the replica
		for {
			if role, err := redistest.Do(replica.Addr, "ROLE"); err == nil && strings.HasPrefix(role, "master") {
				promoted <- time.Since(kill)
				return
			}
			select {
			case <-watching:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	defer func() { done.Store(true); wg.Wait() }() // on a Fatalf too
	for {
		_, err := rs.Take(ctx, req("after"))
		if err == nil {
			res.stopped = time.Since(kill)
			break
		}
		res.failed++
		if time.Now().After(deadline) {
			tb.Fatalf("no decision within a minute of killing the master: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	for fb.Mode() != fleet.ModeStore { // the Fallback's probe follows
		if time.Now().After(deadline) {
			tb.Fatalf("the Fallback still %v a minute after the kill, though the store decided again %v after it", fb.Mode(), res.stopped)
		}
		time.Sleep(time.Millisecond)
	}
	done.Store(true)
	wg.Wait()
	select {
	case res.promoted = <-promoted:
	case <-time.After(time.Until(deadline)):
		tb.Fatalf("the replica not master a minute after the kill, though decisions resumed %v after it", res.stopped)
	}
	res.local = fb.LocalDecisions()
	role, err := redistest.Do(replica.Addr, "ROLE")
	if err != nil || !strings.HasPrefix(role, "master") {
		tb.Fatalf("ROLE of the replica after the failover = %q, %v; want master", role, err)
	}
	if got, err := redistest.Do(replica.Addr, "EXISTS", rs.Key("after")); err != nil || got != "1" {
		tb.Fatalf("EXISTS %s on the promoted replica = %q, %v: decisions did not resume there", rs.Key("after"), got, err)
	}
	return res
}

// TestSentinelFailover kills a real master under a Sentinel: decisions
// resume on the promoted replica without a restart, and through the
// Fallback no request fails meanwhile.
func TestSentinelFailover(t *testing.T) {
	t.Parallel() // Redis and Sentinels of its own, waiting out a failover
	res := failover(t, time.Second, 0)
	t.Logf("decisions stopped %v after the kill (replica promoted after %v; %d failed calls); the fallback answered all, %d locally", res.stopped, res.promoted, res.failed, res.local)
	if res.failed == 0 {
		t.Error("no call failed after the master was killed: the kill did not happen")
	}
	if res.fallbackErr != 0 {
		t.Errorf("%d calls through the Fallback failed during the failover, want 0", res.fallbackErr)
	}
	if res.local == 0 {
		t.Error("the Fallback decided nothing locally during the failover")
	}
}

// BenchmarkSentinelFailover measures how long decisions stop when the
// master dies, with the Sentinel's down-after at 1s (its floor in practice:
// below it, a busy master is taken for dead). Run with -benchtime 3x.
func BenchmarkSentinelFailover(b *testing.B) {
	var stopped, promoted time.Duration
	for range b.N {
		res := failover(b, time.Second, 100*time.Millisecond)
		stopped += res.stopped
		promoted += res.promoted
	}
	b.ReportMetric(float64(stopped.Milliseconds())/float64(b.N), "ms-stopped/failover")
	b.ReportMetric(float64(promoted.Milliseconds())/float64(b.N), "ms-to-promotion/failover")
	b.ReportMetric(0, "ns/op")
}
