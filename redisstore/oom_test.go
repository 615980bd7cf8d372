package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestOutOfMemory runs the store on a Redis over its maxmemory with
// noeviction: every write is refused (OOM), so every decision must fail
// with ErrStoreUnavailable (on_error applies) and count nothing; once
// memory is available again decisions resume.
func TestOutOfMemory(t *testing.T) {
	srv := redistest.StartServer(t)
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}})
	ctx := context.Background()
	l := sluice.PerHour(100)
	r := sluice.Request{Key: "oom", Algorithm: sluice.FixedWindow, Limit: l, Cost: 1, Now: sluicetest.T0}
	for _, c := range [][]string{{"CONFIG", "SET", "maxmemory-policy", "noeviction"}, {"CONFIG", "SET", "maxmemory", "1"}} {
		if _, err := redistest.Do(srv.Addr, c...); err != nil {
			t.Fatal(err)
		}
	}
	calls := map[string]func() error{
		"Take":       func() error { _, err := s.Take(ctx, r); return err },
		"Take (log)": func() error { q := r; q.Algorithm = sluice.SlidingWindowLog; _, err := s.Take(ctx, q); return err },
		"TakeAll":    func() error { return s.TakeAll(ctx, []sluice.Request{r, r}, make([]sluice.Decision, 2)) },
		"SyncTake":   func() error { _, _, err := s.SyncTake(ctx, r); return err },
		"Sync": func() error {
			return s.Sync(ctx, []redisstore.SyncOp{{Key: r.Key, Algorithm: r.Algorithm, Limit: l, Writer: "w", Seq: 1, Hits: []redisstore.Hit{{At: r.Now.UnixMicro(), Cost: 1}}}})
		},
		"Lease": func() error { _, err := s.Lease(ctx, r, redisstore.ReturnOp{}); return err },
	}
	for name, call := range calls {
		err := call()
		if !errors.Is(err, sluice.ErrStoreUnavailable) || !strings.Contains(err.Error(), "OOM") {
			t.Errorf("%s over maxmemory: err = %v, want OOM wrapping ErrStoreUnavailable", name, err)
		}
	}
	if n, err := redistest.Do(srv.Addr, "DBSIZE"); err != nil || n != "0" {
		t.Fatalf("DBSIZE after refused writes = %q, %v; want 0", n, err)
	}
	if _, err := redistest.Do(srv.Addr, "CONFIG", "SET", "maxmemory", "0"); err != nil {
		t.Fatal(err)
	}
	if d, err := s.Take(ctx, r); err != nil || !d.Allowed || d.Remaining != 99 {
		t.Fatalf("Take with memory again = %+v, %v; want allowed, Remaining 99 (nothing counted before)", d, err)
	}
}
