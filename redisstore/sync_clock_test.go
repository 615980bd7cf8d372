package redisstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// TestSyncExpiryOnHitClock: a key written by a Sync batch expires on the
// clock its hits carry, as a key written by Take does on Request.Now: a
// token bucket of 10/hour left one token down by a hit is at rest 6
// minutes after it, so the key lives 6 minutes and the margin, whether the
// caller's clock is years behind this machine's or years ahead.
func TestSyncExpiryOnHitClock(t *testing.T) {
	srv := redistest.StartServer(t)
	st, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 5 * time.Second, ExpiryMargin: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	const want = 6*time.Minute + 10*time.Second
	for _, tc := range []struct {
		name string
		at   time.Time
	}{
		{"now", time.Now()},
		{"years behind", time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)},
		{"years ahead", time.Now().AddDate(30, 0, 0)},
	} {
		key := "sync-expiry/" + tc.name
		at := tc.at.UnixMicro()
		// Two hits, the later one last: the expiry counts from it.
		tk, err := sluice.PerHour(10).Ticks()
		if err != nil {
			t.Fatal(err)
		}
		ops := []redisstore.SyncOp{{Key: key, Algorithm: sluice.TokenBucket, Limit: sluice.PerHour(10),
			Hits: []redisstore.Hit{{At: at - int64(time.Minute/time.Microsecond), Cost: 0}, {At: at, Cost: tk.Period}}}} // one request
		if err := st.Sync(context.Background(), ops); err != nil {
			t.Fatalf("%s: Sync: %v", tc.name, err)
		}
		got, err := redistest.Do(srv.Addr, "PTTL", st.KeyOf(&sluice.Request{Key: key}))
		if err != nil {
			t.Fatal(err)
		}
		ms, err := strconv.ParseInt(got, 10, 64)
		if err != nil {
			t.Fatalf("%s: PTTL %q", tc.name, got)
		}
		if d := time.Duration(ms) * time.Millisecond; d < want-5*time.Second || d > want {
			t.Errorf("%s: the key expires in %v, want %v (rest 6m after the last hit, and the 10s margin)", tc.name, d, want)
		}
		// A read leaves the key's expiry as it was.
		if err := st.Sync(context.Background(), []redisstore.SyncOp{{Key: key, Algorithm: sluice.TokenBucket, Limit: sluice.PerHour(10)}}); err != nil {
			t.Fatal(err)
		}
		if got, err = redistest.Do(srv.Addr, "PTTL", st.KeyOf(&sluice.Request{Key: key})); err != nil {
			t.Fatal(err)
		}
		if after, _ := strconv.ParseInt(got, 10, 64); after > ms || after < ms-5000 {
			t.Errorf("%s: a read moved the key's expiry from %d ms to %s ms", tc.name, ms, got)
		}
	}
}
