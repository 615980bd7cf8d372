package memstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

func TestConformance(t *testing.T) {
	sluicetest.Run(t, func(t *testing.T) sluice.Store { return memstore.New(memstore.Options{}) })
}

func TestConformanceOneShard(t *testing.T) {
	// Every key in one shard: the incremental sweep visits the keys of
	// every subtest constantly, and forgetting keys at rest must never
	// change a decision.
	s := memstore.New(memstore.Options{Shards: 1})
	sluicetest.Run(t, func(t *testing.T) sluice.Store { return s })
}

func TestMaxKeysEvictsNearestToRest(t *testing.T) {
	s := memstore.New(memstore.Options{Shards: 1, MaxKeys: 4})
	ctx := context.Background()
	t0 := sluicetest.T0
	take := func(key string, cost int64, at time.Time) sluice.Decision {
		t.Helper()
		d, err := s.Take(ctx, sluice.Request{Key: key, Algorithm: sluice.TokenBucket, Limit: sluice.PerMinute(10), Cost: cost, Now: at})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	// k1 rests after 6 s, k2 after 12 s, …: k1 is the cheapest to forget.
	for i := int64(1); i <= 4; i++ {
		take(fmt.Sprint("k", i), i, t0)
	}
	if s.Len() != 4 || s.Evictions() != 0 {
		t.Fatalf("after 4 keys: Len %d, Evictions %d; want 4, 0", s.Len(), s.Evictions())
	}
	take("k5", 1, t0)
	if s.Len() != 4 || s.Evictions() != 1 {
		t.Fatalf("after a 5th key at cap 4: Len %d, Evictions %d; want 4, 1", s.Len(), s.Evictions())
	}
	if d := take("k1", 0, t0); d.Remaining != 10 {
		t.Errorf("k1 after eviction: Remaining %d, want 10 (forgotten)", d.Remaining)
	}
	if d := take("k2", 0, t0); d.Remaining != 8 {
		t.Errorf("k2: Remaining %d, want 8 (kept)", d.Remaining)
	}
}

func TestRestingKeysAreSweptNotEvicted(t *testing.T) {
	s := memstore.New(memstore.Options{Shards: 1, MaxKeys: 8})
	ctx := context.Background()
	for i := range 8 {
		if _, err := s.Take(ctx, sluice.Request{Key: fmt.Sprint("a", i), Algorithm: sluice.FixedWindow, Limit: sluice.PerSecond(5), Cost: 1, Now: sluicetest.T0}); err != nil {
			t.Fatal(err)
		}
	}
	// One second later every window has ended: new keys replace the
	// resting ones without evicting anything.
	later := sluicetest.T0.Add(time.Second)
	for i := range 8 {
		if _, err := s.Take(ctx, sluice.Request{Key: fmt.Sprint("b", i), Algorithm: sluice.SlidingWindowLog, Limit: sluice.PerSecond(5), Cost: 1, Now: later}); err != nil {
			t.Fatal(err)
		}
	}
	if s.Evictions() != 0 || s.Len() > 8 {
		t.Fatalf("Len %d, Evictions %d; want ≤ 8 keys and no evictions", s.Len(), s.Evictions())
	}
	if n := s.Sweep(later.Add(time.Second)); n == 0 || s.Len() != 0 {
		t.Fatalf("Sweep after every key rests deleted %d, left %d; want all gone", n, s.Len())
	}
}

func TestRequestsAtRestAreNotStored(t *testing.T) {
	s := memstore.New(memstore.Options{})
	// A query (cost 0) on a new key, and a denial that changes nothing,
	// leave nothing behind.
	for _, r := range []sluice.Request{
		{Key: "q", Algorithm: sluice.GCRA, Limit: sluice.PerSecond(1), Cost: 0, Now: sluicetest.T0},
		{Key: "big", Algorithm: sluice.TokenBucket, Limit: sluice.PerSecond(1), Cost: 5, Now: sluicetest.T0},
	} {
		if _, err := s.Take(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	if s.Len() != 0 {
		t.Fatalf("Len = %d, want 0", s.Len())
	}
}

func TestConcurrentHotKeyCountsExactly(t *testing.T) {
	s := memstore.New(memstore.Options{})
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 500 {
				d, err := s.Take(context.Background(), sluice.Request{Key: "hot", Algorithm: sluice.SlidingWindowLog, Limit: sluice.PerHour(1000), Cost: 1, Now: sluicetest.T0})
				if err != nil {
					t.Error(err)
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 1000 {
		t.Fatalf("admitted %d of 4000 concurrent requests on 1000/h, want exactly 1000", admitted.Load())
	}
}

// TestNamespacesThatHashAlike: namespaces differing only where the
// namespace hash does not look (same length, first, middle and last 8
// bytes) share a probe run, never a state.
func TestNamespacesThatHashAlike(t *testing.T) {
	s := memstore.New(memstore.Options{Shards: 1})
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	nss := []string{"abcdefgh-X-12345678-Y-ijklmnop|", "abcdefgh-Y-12345678-X-ijklmnop|", "abcdefgh-Z-12345678-Z-ijklmnop|"}
	for i, ns := range nss {
		for j := range i + 1 {
			d, err := s.Take(ctx, sluice.Request{Namespace: ns, Key: "k", Algorithm: sluice.FixedWindow, Limit: sluice.PerMinute(5), Cost: 1, Now: now})
			if err != nil || d.Remaining != int64(4-j) {
				t.Fatalf("namespace %d, take %d: %+v, %v; want remaining %d", i, j, d, err, 4-j)
			}
		}
	}
	if n := s.Len(); n != 3 {
		t.Fatalf("Len = %d, want 3", n)
	}
	if err := s.Reset(ctx, sluice.Request{Namespace: nss[1], Key: "k", Algorithm: sluice.FixedWindow, Limit: sluice.PerMinute(5)}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int64{3, 4, 1} {
		d, _ := s.Take(ctx, sluice.Request{Namespace: nss[i], Key: "k", Algorithm: sluice.FixedWindow, Limit: sluice.PerMinute(5), Cost: 1, Now: now})
		if d.Remaining != want {
			t.Errorf("namespace %d after resetting namespace 1: remaining %d, want %d", i, d.Remaining, want)
		}
	}
}

// TestMaxKeysExact: MaxKeys is the number of keys held at most, exactly,
// whatever the shard count (max_keys: 10 once held 256: one per shard).
func TestMaxKeysExact(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ maxKeys, shards int }{{10, 0}, {1, 0}, {3, 0}, {1000, 0}, {1001, 256}, {300, 7}} {
		s := memstore.New(memstore.Options{MaxKeys: tc.maxKeys, Shards: tc.shards})
		// 50 times the cap: every shard gets keys enough to fill it (the
		// chance that one of 8 shards gets none of 500 keys is 1e-29).
		const times = 50
		for i := range times * tc.maxKeys {
			if _, err := s.Take(ctx, sluice.Request{Key: fmt.Sprint("k", i), Algorithm: sluice.TokenBucket, Limit: sluice.PerHour(5), Cost: 1, Now: sluicetest.T0}); err != nil {
				t.Fatal(err)
			}
			if i%97 == 0 && s.Len() > tc.maxKeys {
				t.Fatalf("MaxKeys %d, Shards %d: %d keys held after %d inserts", tc.maxKeys, tc.shards, s.Len(), i+1)
			}
		}
		if s.Len() != tc.maxKeys {
			t.Errorf("MaxKeys %d, Shards %d: %d keys held after %d distinct keys; want exactly the cap", tc.maxKeys, tc.shards, s.Len(), times*tc.maxKeys)
		}
	}
}

// TestNamespacesApart: keys of different namespaces never share a state,
// whatever form the store keeps each namespace in: numbered (a Limiter's),
// short, long, or one whose text is a numbered namespace's stored form.
func TestNamespacesApart(t *testing.T) {
	s := memstore.New(memstore.Options{})
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	spaces := []string{
		"", "a|", "api|token_bucket,1/h|", "web|token_bucket,1/h|",
		"\xff\x00\x00\x01", "\xff\x00\x00\x02", strings.Repeat("n", 300) + "|",
		"api|token_bucket,1/h|k", // its key "" is "api|token_bucket,1/h|"+"k" as text
	}
	for _, ns := range spaces {
		for _, key := range []string{"k", "", "client-1234"} {
			r := sluice.Request{Namespace: ns, Key: key, Algorithm: sluice.FixedWindow, Limit: sluice.Limit{Rate: 1, Period: time.Hour}, Cost: 1, Now: now}
			d, err := s.Take(ctx, r)
			if err != nil || !d.Allowed {
				t.Fatalf("first request of (%q, %q): %+v, %v: another namespace's state was taken for it", ns, key, d, err)
			}
			if d, _ := s.Take(ctx, r); d.Allowed {
				t.Fatalf("second request of (%q, %q) allowed: its state was not kept", ns, key)
			}
		}
	}
	if got, want := s.Len(), len(spaces)*3; got != want {
		t.Fatalf("Len() = %d, want %d", got, want)
	}
}
