package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestScriptFlush empties Redis's script cache (SCRIPT FLUSH, as a Redis
// restarted or failed over to a replica that never ran them) before every
// call of every path that runs a script: each call must reload its script
// and count exactly once (EVALSHA answers NOSCRIPT without running
// anything; the EVAL that follows runs it once).
func TestScriptFlush(t *testing.T) {
	srv := redistest.StartServer(t)
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}})
	ctx := context.Background()
	l := sluice.PerHour(100)
	req := func(key string) sluice.Request {
		return sluice.Request{Key: key, Algorithm: sluice.FixedWindow, Limit: l, Cost: 1, Now: sluicetest.T0}
	}
	flush := func() {
		t.Helper()
		if _, err := redistest.Do(srv.Addr, "SCRIPT", "FLUSH"); err != nil {
			t.Fatal(err)
		}
	}
	counted := func(key string) string {
		t.Helper()
		v, err := redistest.Do(srv.Addr, "GET", s.Key(key))
		if err != nil {
			t.Fatal(err)
		}
		if f := strings.Fields(v); len(f) == 3 {
			return f[1]
		}
		return v
	}
	var window int64 // the window of the leases, to give units back
	paths := []struct {
		name string
		call func(key string) error
	}{
		{"Take", func(k string) error { _, err := s.Take(ctx, req(k)); return err }},
		{"Take report", func(k string) error { r := req(k); r.Force = true; _, err := s.Take(ctx, r); return err }},
		{"TakeAll", func(k string) error { return s.TakeAll(ctx, []sluice.Request{req(k)}, make([]sluice.Decision, 1)) }},
		{"SyncTake", func(k string) error { _, _, err := s.SyncTake(ctx, req(k)); return err }},
		{"Sync", func(k string) error {
			return s.Sync(ctx, []redisstore.SyncOp{{Key: k, Algorithm: sluice.FixedWindow, Limit: l, Hits: []redisstore.Hit{{At: sluicetest.T0.UnixMicro(), Cost: 1}}}})
		}},
		{"Lease", func(k string) error {
			g, err := s.Lease(ctx, req(k), redisstore.ReturnOp{})
			window = g.State.T
			if err == nil && g.Units != 1 {
				err = fmt.Errorf("granted %d units, want 1", g.Units)
			}
			return err
		}},
	}
	for _, p := range paths {
		key := "noscript/" + p.name
		for i := range 3 {
			flush()
			if err := p.call(key); err != nil {
				t.Fatalf("%s %d after SCRIPT FLUSH: %v", p.name, i, err)
			}
		}
		if got := counted(key); got != "3" {
			t.Errorf("%s, 3 calls each after SCRIPT FLUSH: Redis counts %q, want 3", p.name, got)
		}
	}
	// Return gives back once.
	flush()
	if err := s.Return(ctx, []redisstore.ReturnOp{{Key: "noscript/Lease", Algorithm: sluice.FixedWindow, Limit: l, Units: 2, Window: window, Now: sluicetest.T0}}); err != nil {
		t.Fatalf("Return after SCRIPT FLUSH: %v", err)
	}
	if got := counted("noscript/Lease"); got != "1" {
		t.Errorf("3 units leased, 2 given back after SCRIPT FLUSH: Redis counts %q, want 1", got)
	}
	// Concurrent Takes (pipelined and batched) after a flush.
	flush()
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if _, err := s.Take(ctx, req("noscript/concurrent")); err != nil {
				t.Errorf("concurrent Take after SCRIPT FLUSH: %v", err)
			}
		})
	}
	wg.Wait()
	if got := counted("noscript/concurrent"); got != "20" {
		t.Errorf("20 concurrent Takes after SCRIPT FLUSH: Redis counts %q, want 20", got)
	}
}
