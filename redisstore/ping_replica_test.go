package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// TestPingReplica turns the Redis a store talks to into a replica (as a
// failover does to the old master, until the store hears of it): every
// decision fails READONLY there, so Ping (the daemon's /readyz, the
// Fallback's probe) must fail too, and succeed again once the node is a
// master. Before, PING and the ACL probe, neither a write, succeeded on
// the replica: /readyz said ready while no request could be decided, and
// the Fallback left local mode at each probe only to fail the next call.
func TestPingReplica(t *testing.T) {
	srv := redistest.StartServer(t)
	other := redistest.StartServer(t)
	// open's generous timeout: every call must be answered (READONLY on
	// the replica comes at once).
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}})
	ctx := context.Background()
	// The key Ping writes to is the ACL probe's: a limiter key of that
	// name, whose state is no hash, must not fail it.
	if _, err := s.Take(ctx, req("acl-probe", 0)); err != nil {
		t.Fatal(err)
	}
	if typ, err := redistest.Do(srv.Addr, "TYPE", s.Key("acl-probe")); err != nil || typ == "hash" || typ == "none" {
		t.Fatalf("TYPE %s = %q, %v; want a key of another type than hash", s.Key("acl-probe"), typ, err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping on a master: %v", err)
	}
	host, port, _ := strings.Cut(other.Addr, ":")
	if _, err := redistest.Do(srv.Addr, "REPLICAOF", host, port); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Take(ctx, req("readonly", 0)); err == nil || !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("Take on a replica: err = %v, want READONLY", err)
	}
	if err := s.Ping(ctx); !errors.Is(err, sluice.ErrStoreUnavailable) || !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("Ping on a replica: err = %v, want READONLY wrapping ErrStoreUnavailable", err)
	}
	if _, err := redistest.Do(srv.Addr, "REPLICAOF", "NO", "ONE"); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping on the node, a master again: %v", err)
	}
}
