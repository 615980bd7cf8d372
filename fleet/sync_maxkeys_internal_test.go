package fleet

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
)

// TestSyncMaxKeysAgeOut: a Sync holding MaxKeys keys decides a new key in
// the store and counts it in Overflow; once the held key has been idle two
// intervals it ages out, and the new key is held. On a fake clock: with a
// real Redis and a 10 ms interval (TestSyncMaxKeys until now), a stall of
// about two intervals between the held key's last request and the new
// key's second one aged the held key out first, and the new key was never
// refused room (a 25 ms pause there failed it every time).
func TestSyncMaxKeysAgeOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const iv = 100 * time.Millisecond
		m := newMemShared()
		s, err := NewSync(m, SyncOptions{Interval: iv, MaxKeys: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		take := func(key string) {
			t.Helper()
			r := sluice.Request{Key: "maxkeys/" + key, Algorithm: sluice.TokenBucket, Limit: sluice.PerHour(10), Cost: 1, Now: time.Now()}
			if _, err := s.Take(context.Background(), r); err != nil {
				t.Fatalf("Take %s: %v", key, err)
			}
		}
		// A key becomes an entry on its second request within two intervals.
		take("x")
		take("x")
		if got := s.Stats(); got.Keys != 1 || got.Overflow != 0 || got.Cold != 1 {
			t.Fatalf("x twice with MaxKeys 1: %d keys, overflow %d, cold %d; want 1, 0 and 1", got.Keys, got.Overflow, got.Cold)
		}
		take("y") // cold
		take("y") // beyond MaxKeys 1: decided in the store
		if got := s.Stats(); got.Keys != 1 || got.Overflow != 1 || got.Cold != 2 {
			t.Fatalf("then y twice: %d keys, overflow %d, cold %d; want 1, 1 and 2", got.Keys, got.Overflow, got.Cold)
		}
		if m.takes != 3 {
			t.Errorf("%d exact Takes in the store, want 3 (x's first, y's two)", m.takes)
		}
		time.Sleep(2 * iv) // nothing asked for: x ages out (two intervals unused)
		synctest.Wait()
		if got := s.Stats(); got.Keys != 0 {
			t.Fatalf("x idle two intervals: %d keys held, want 0 (aged out)", got.Keys)
		}
		take("y") // cold again: its request noted two intervals ago is forgotten
		take("y") // held, now that there is room
		if got := s.Stats(); got.Keys != 1 || got.Overflow != 1 || got.Cold != 3 {
			t.Errorf("y twice after x aged out: %d keys, overflow %d, cold %d; want 1, 1 (y held) and 3", got.Keys, got.Overflow, got.Cold)
		}
	})
}
