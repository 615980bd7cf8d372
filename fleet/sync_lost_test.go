package fleet_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// untilFlushed retries Flush until a batch succeeds (the client reconnects
// on its own), for at most 10s.
func untilFlushed(t *testing.T, s *fleet.Sync) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := s.Flush()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Flush still failing after 10s: %v", err)
		}
	}
}

// count reads the fixed window count N of key k from Redis.
func count(t *testing.T, addr, k string) string {
	t.Helper()
	v, err := redistest.Do(addr, "GET", k)
	if err != nil {
		t.Fatalf("GET %s: %v", k, err)
	}
	f := strings.Fields(v)
	if len(f) != 3 {
		t.Fatalf("GET %s = %q, want \"T N M\"", k, v)
	}
	return f[1]
}

// TestSyncBatchReplyLost runs a batch in Redis and loses its reply (the
// connection is cut after Redis answered): the batch fails, and the next
// one must not add its hits again. Redis must count each admitted request
// once: 10, not 18.
func TestSyncBatchReplyLost(t *testing.T) {
	srv := redistest.StartServer(t)
	key := fmt.Sprintf("lostbatch-%d", time.Now().UnixNano())
	cut := redistest.NewCutter(t, srv.Addr, key, false)
	rs := fleet.OpenRedis(t, redisstore.Options{Addrs: []string{cut.Addr}})
	s := newSync(t, rs, fleet.SyncOptions{Interval: time.Hour}) // batches only when flushed
	ctx := context.Background()
	// One instant, at an hour's start: on the clock, an hour ending
	// between the first decisions and the retried batch moved the
	// window, the resent hits counted in the new one and the cold
	// decision's hit stayed in the old (Redis counted 19 of 20).
	r := sluice.Request{Key: key, Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(1000), Cost: 1, Now: time.Now().Truncate(time.Hour)}
	const n = 10
	for i := range n {
		if d, err := s.Take(ctx, r); err != nil || !d.Allowed {
			t.Fatalf("Take %d = %+v, %v; want allowed", i, d, err)
		}
	}
	if st := s.Stats(); st.Local == 0 {
		t.Fatalf("Stats = %+v: no local decision, nothing for the batch to send", st)
	}
	admitted := n
	// Twice: the second batch sends the first one's hits again and the
	// hits admitted since, and loses its reply too.
	for round := range 2 {
		cut.Arm()
		if err := s.Flush(); err == nil {
			t.Fatalf("round %d: Flush whose reply was lost succeeded", round)
		}
		if !cut.Cut() {
			t.Fatalf("round %d: the batch's reply was not lost: the test did not cut", round)
		}
		for i := range 5 {
			if d, err := s.Take(ctx, r); err != nil || !d.Allowed {
				t.Fatalf("round %d: Take %d after the cut = %+v, %v; want allowed", round, i, d, err)
			}
			admitted++
		}
	}
	untilFlushed(t, s)
	if err := s.Flush(); err != nil {
		t.Fatalf("Flush after recovery: %v", err)
	}
	if got := count(t, srv.Addr, rs.Key(key)); got != fmt.Sprint(admitted) {
		t.Fatalf("Redis counts %s requests after batches whose replies were lost and their retries, want %d (admitted)", got, admitted)
	}
}
