package fleet_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// keysHeard is a redisstore.RefundListener that counts the keys
// WatchRefunds tells of, and tells the test when it has heard of all.
type keysHeard struct {
	mu      sync.Mutex
	heard   map[string]int
	want    int // all heard once len(heard) reaches it
	all     chan struct{}
	last    chan struct{} // closed when the key "last" is heard of
	resumed chan struct{}
}

func (h *keysHeard) ForgetKey(ns, key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if key == "last" {
		close(h.last)
		return
	}
	h.heard[ns+"\x00"+key]++
	if len(h.heard) == h.want {
		close(h.all)
	}
}
func (h *keysHeard) Pause()  {}
func (h *keysHeard) Resume() { h.resumed <- struct{}{} }

// cmdCalls sums, over the servers at addrs, the calls of each command
// named (INFO commandstats, lower case: "publish", "evalsha").
func cmdCalls(t *testing.T, addrs []string, names ...string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, addr := range addrs {
		info, err := redistest.Do(addr, "INFO", "commandstats")
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(info) {
			for _, name := range names {
				if rest, ok := strings.CutPrefix(line, "cmdstat_"+name+":calls="); ok {
					n, _, _ := strings.Cut(rest, ",")
					v, err := strconv.ParseInt(n, 10, 64)
					if err != nil {
						t.Fatalf("INFO commandstats: %q", line)
					}
					out[name] += v
				}
			}
		}
	}
	return out
}

// TestLeaseClosePublishesInBatches: a Lease holding units of many keys
// (10,000 on one server, 2,000 on a 3-node Cluster) hands them back at
// Close, and every other instance must forget exactly the keys given
// back: every one of them, and none of the keys whose units were all
// spent (every tenth). Close used to publish each key on its own, one
// PUBLISH per key (10,000 at a shutdown); the keys now go out many to a
// message, so the PUBLISHes are a small fraction of the keys.
func TestLeaseClosePublishesInBatches(t *testing.T) {
	t.Parallel() // a Cluster (or Redis) and stores of its own
	t.Run("server", func(t *testing.T) {
		srv := redistest.StartServer(t)
		testLeaseClosePublishes(t, []string{srv.Addr}, false, 10000)
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t)
		testLeaseClosePublishes(t, cl.Addrs, true, 2000)
	})
}

func testLeaseClosePublishes(t *testing.T, addrs []string, cluster bool, n int) {
	ctx := context.Background()
	o := redisstore.Options{Addrs: addrs, Cluster: cluster, PublishRefunds: true}
	a, b := fleet.OpenRedis(t, o), fleet.OpenRedis(t, o)
	la := newLease(t, a, fleet.LeaseOptions{Chunk: 3})
	key := func(i int) string { return fmt.Sprintf("key-%05d", i) }
	spent := func(i int) bool { return i%10 == 0 } // all its units spent: nothing to give back
	h := &keysHeard{heard: map[string]int{}, all: make(chan struct{}), last: make(chan struct{}), resumed: make(chan struct{}, 10)}
	for i := range n {
		if !spent(i) {
			h.want++
		}
	}
	watchRefunds(t, b, h, h.resumed)

	// Each key: decided in Redis, then a lease of 3 and one spent; the
	// spent keys spend the other two as well.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				r := sluice.Request{Namespace: "api", Key: key(i), Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(100), Cost: 1, Now: sluicetest.T0}
				takes := 2
				if spent(i) {
					takes = 4
				}
				for range takes {
					if d, err := la.Take(ctx, r); err != nil || !d.Allowed {
						errs <- fmt.Errorf("Take(%q) = %+v, %v; want allowed", r.Key, d, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if st := la.Stats(); st.Keys != n || st.Granted != uint64(3*n) {
		t.Fatalf("lease before Close: %+v; want %d keys, %d units granted", st, n, 3*n)
	}

	names := []string{"publish", "evalsha", "eval"}
	before := cmdCalls(t, addrs, names...)
	start := time.Now()
	if err := la.CloseAt(sluicetest.T0); err != nil {
		t.Fatalf("CloseAt: %v", err)
	}
	took := time.Since(start)
	after := cmdCalls(t, addrs, names...)
	if got, want := la.Stats().Returned, uint64(2*h.want); got != want {
		t.Fatalf("units returned = %d; want %d", got, want)
	}
	await(t, h.all, "message of every key given back")
	if !cluster {
		// On one server the messages come in the order published: a
		// refund published after Close's comes after every one of them.
		// A refund publishes only what it gives back: "last" must count one.
		r := sluice.Request{Namespace: "api", Key: "last", Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(100), Cost: 1, Now: sluicetest.T0}
		if d, err := a.Take(ctx, r); err != nil || !d.Allowed {
			t.Fatalf("Take: %+v, %v", d, err)
		}
		if _, err := a.Refund(ctx, r); err != nil {
			t.Fatalf("Refund: %v", err)
		}
		await(t, h.last, "message of the last refund")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range n {
		k := "api\x00" + key(i)
		if got, want := h.heard[k], map[bool]int{true: 0, false: 1}[spent(i)]; got != want {
			t.Errorf("%s: told %d times; want %d", key(i), got, want)
		}
	}
	pubs := after["publish"] - before["publish"]
	scripts := after["evalsha"] + after["eval"] - before["evalsha"] - before["eval"]
	t.Logf("Close handed back %d of %d keys: %d PUBLISH, %d scripts, in %v", h.want, n, pubs, scripts, took)
	if pubs < 1 || pubs > int64(h.want/100) {
		t.Errorf("Close ran %d PUBLISH for %d keys given back; want 1 to %d (many keys a message)", pubs, h.want, h.want/100)
	}
}
