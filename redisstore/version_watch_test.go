package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// A server that takes the place of the one New met (an address moved to
// another server, as a failover or a restart on another binary does) is
// checked once RunIDs has met it: CheckVersions, and Require, refuse it
// with ErrVersion in New's words, naming the feature, both versions and
// the node; a good server back passes again. Before, both checked the
// versions read at connect only.
func TestVersionRecheckedAfterRunIDs(t *testing.T) {
	t.Parallel()
	good, old := redistest.StartServer(t), redistest.StartServer(t)
	six := redistest.NewOlder(t, old.Addr, "6.0.16")
	sw := redistest.NewSwitch(t, good.Addr)
	defer6 := redisstore.Need{Feature: "deferrals", MinRedis: "6.2", MinRedisFor: "XAUTOCLAIM"}
	s := open(t, redisstore.Options{Addrs: []string{sw.Addr}, RedisTime: true})
	ctx := context.Background()
	first, err := s.RunIDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CheckVersions([]redisstore.Need{defer6}); err != nil {
		t.Fatalf("CheckVersions on Redis 7.0: %v", err)
	}

	sw.To(six.Addr)
	var ids string
	untilOK(t, "RunIDs of the server behind the switch", func() error {
		ids, err = s.RunIDs(ctx)
		if err == nil && ids == first {
			err = errors.New("run_id unchanged")
		}
		return err
	})
	want := "redisstore: check [" + sw.Addr + "]: deferrals needs Redis 6.2 or later (XAUTOCLAIM); " + sw.Addr + " runs 6.0.16"
	err = s.CheckVersions([]redisstore.Need{defer6})
	if !errors.Is(err, redisstore.ErrVersion) || err.Error() != want {
		t.Errorf("CheckVersions on the server that took the address (6.0.16): %v; want ErrVersion %q", err, want)
	}
	if err := s.CheckVersions(nil); err != nil {
		t.Errorf("CheckVersions of no need on 6.0.16 (the store needs 5.0): %v", err)
	}
	if err := s.Require(ctx, []redisstore.Need{defer6}); !errors.Is(err, redisstore.ErrVersion) || !strings.Contains(err.Error(), "runs 6.0.16") {
		t.Errorf("Require on the server that took the address (6.0.16): %v; want ErrVersion", err)
	}
	if err := s.CheckVersions([]redisstore.Need{{Feature: "typo", MinRedis: "six"}}); err == nil || errors.Is(err, redisstore.ErrVersion) || !strings.Contains(err.Error(), `"six"`) {
		t.Errorf("CheckVersions with MinRedis six: %v; want an error naming it (no ErrVersion)", err)
	}

	sw.To(good.Addr)
	untilOK(t, "RunIDs of the good server back", func() error {
		ids, err = s.RunIDs(ctx)
		if err == nil && ids != first {
			err = errors.New("run_id not the good server's")
		}
		return err
	})
	if err := s.CheckVersions([]redisstore.Need{defer6}); err != nil {
		t.Errorf("CheckVersions with the good server back: %v", err)
	}
}

// On a Cluster RunIDs reads every node, and CheckVersions names each one
// too old.
func TestVersionRecheckedCluster(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	s := open(t, redisstore.Options{Addrs: c.Addrs[:1], Cluster: true, RedisTime: true})
	if _, err := s.RunIDs(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.CheckVersions([]redisstore.Need{{Feature: "streams", MinRedis: "5.0", MinRedisFor: "XADD"}}); err != nil {
		t.Errorf("CheckVersions of a need every node meets: %v", err)
	}
	future := redisstore.Need{Feature: "a feature from the future", MinRedis: "256.0", MinRedisFor: "TIMETRAVEL"}
	err := s.CheckVersions([]redisstore.Need{future})
	if !errors.Is(err, redisstore.ErrVersion) {
		t.Fatalf("CheckVersions on a Cluster of a need for Redis 256.0: %v; want ErrVersion", err)
	}
	for _, a := range c.Addrs {
		if !strings.Contains(err.Error(), a+" runs ") {
			t.Errorf("CheckVersions on a Cluster of a need for Redis 256.0: %v; want it to name node %s", err, a)
		}
	}
}

// A Cluster node too old for a need (a replica on Redis 6.0, told to the
// clients at a relay in front of it) fails CheckVersions once RunIDs has
// met it; once the Cluster forgot it, RunIDs leaves it out (and its
// run_id) and CheckVersions passes again, though the node runs on and the
// client, never redirected by it, still holds a connection to it. RunIDs
// used to ask every node the client held, so a node that left stayed
// "too old" for as long as the client did not refresh its map: for ever,
// for a replica, which nothing is routed to.
func TestVersionRecheckedClusterNodeLeft(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	replica, at := c.StartReplica(t, 0, func(addr string) string { return redistest.NewOlder(t, addr, "6.0.16").Addr })
	defer6 := redisstore.Need{Feature: "deferrals", MinRedis: "6.2", MinRedisFor: "XAUTOCLAIM"}
	s := open(t, redisstore.Options{Addrs: c.Addrs[:1], Cluster: true, RedisTime: true})
	ctx := context.Background()
	with, err := s.RunIDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(with, at+"=") {
		t.Fatalf("RunIDs on a Cluster with a replica at %s: %q; want it named", at, with)
	}
	err = s.CheckVersions([]redisstore.Need{defer6})
	if !errors.Is(err, redisstore.ErrVersion) || !strings.Contains(err.Error(), at+" runs 6.0.16") {
		t.Fatalf("CheckVersions with a replica on 6.0.16: %v; want ErrVersion naming %s", err, at)
	}

	c.Forget(t, replica, at)
	without, err := s.RunIDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(without, at+"=") {
		t.Errorf("RunIDs after the Cluster forgot the replica at %s: %q; want it left out", at, without)
	}
	if err := s.CheckVersions([]redisstore.Need{defer6}); err != nil {
		t.Errorf("CheckVersions after the Cluster forgot the replica on 6.0.16: %v; want nil", err)
	}
}

// A Cluster node that left and hangs (a host gone silent, its
// connection never closed, so the client keeps it) does not fail RunIDs:
// the nodes are asked together, and one that does not answer but that no
// master lists any more is left out. RunIDs used to fail at every call
// (the node's INFO timing out), the restart watch went blind, and the
// version check kept the node's old version. One still listed that does
// not answer fails RunIDs, as before.
func TestVersionRecheckedClusterNodeLeftHung(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	replica, at := c.StartReplica(t, 0, func(addr string) string { return redistest.NewOlder(t, addr, "6.0.16").Addr })
	defer6 := redisstore.Need{Feature: "deferrals", MinRedis: "6.2", MinRedisFor: "XAUTOCLAIM"}
	s := open(t, redisstore.Options{Addrs: c.Addrs[:1], Cluster: true, RedisTime: true, Timeout: 2 * time.Second})
	ctx := context.Background()
	if _, err := s.RunIDs(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.CheckVersions([]redisstore.Need{defer6}); !errors.Is(err, redisstore.ErrVersion) {
		t.Fatalf("CheckVersions with a replica on 6.0.16: %v; want ErrVersion", err)
	}

	c.Forget(t, replica, at)
	replica.Pause()
	t.Cleanup(replica.Resume)
	ids, err := s.RunIDs(ctx)
	if err != nil {
		t.Fatalf("RunIDs with a hung node the Cluster forgot: %v; want it left out", err)
	}
	if strings.Contains(ids, at+"=") || strings.Count(ids, "=") != 3 {
		t.Errorf("RunIDs with a hung node the Cluster forgot: %q; want the three masters", ids)
	}
	if err := s.CheckVersions([]redisstore.Need{defer6}); err != nil {
		t.Errorf("CheckVersions after the Cluster forgot the hung replica on 6.0.16: %v; want nil", err)
	}

	c.Nodes[1].Pause()
	t.Cleanup(c.Nodes[1].Resume)
	if _, err := s.RunIDs(ctx); !errors.Is(err, sluice.ErrStoreUnavailable) || !strings.Contains(err.Error(), c.Addrs[1]) {
		t.Errorf("RunIDs with a master hung: %v; want ErrStoreUnavailable naming %s", err, c.Addrs[1])
	}
}
