package fleet_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// onServerAndCluster runs test as subtests "server" (one redis-server) and
// "cluster" (a real 3-node Cluster), each with the Options that reach it
// (Addrs, and Cluster for the second): what the fleet promises over one
// Redis it promises over a Cluster too.
//
// The two run in parallel (while the Cluster's nodes start and join, the
// server's run goes on): test must own what it touches, its Redis, its
// stores and keys, and change nothing shared by the package's tests.
func onServerAndCluster(t *testing.T, test func(t *testing.T, o redisstore.Options)) {
	t.Helper()
	t.Run("server", func(t *testing.T) {
		t.Parallel()
		srv := redistest.StartServer(t)
		test(t, redisstore.Options{Addrs: []string{srv.Addr}})
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		cl := redistest.StartCluster(t)
		test(t, redisstore.Options{Addrs: cl.Addrs, Cluster: true})
	})
}

// keysApart returns n keys under base: over a Cluster (o.Cluster) the i-th
// on the master at o.Addrs[i] (n at most len(o.Addrs)), so that each is
// decided on a master of its own; over one Redis, any n keys.
func keysApart(t *testing.T, o redisstore.Options, st *redisstore.Store, base string, n int) []string {
	t.Helper()
	keys := make([]string, n)
	if !o.Cluster {
		for i := range keys {
			keys[i] = base + fmt.Sprint(i)
		}
		return keys
	}
	if n > len(o.Addrs) {
		t.Fatalf("keysApart: %d keys on %d masters", n, len(o.Addrs))
	}
	found := 0
	for i := 0; found < n; i++ {
		if i == 100000 {
			t.Fatalf("keysApart: %d of %d masters found a key in %d", found, n, i)
		}
		k := base + fmt.Sprint(i)
		for j := range keys {
			if keys[j] == "" && serves(t, o.Addrs[j], st.KeyOf(&sluice.Request{Key: k})) {
				keys[j] = k
				found++
				break
			}
		}
	}
	return keys
}

// serves reports whether the Cluster node at addr serves the Redis key
// rk: it answers a command of it rather than MOVED.
func serves(t *testing.T, addr, rk string) bool {
	t.Helper()
	_, err := redistest.Do(addr, "EXISTS", rk)
	if err != nil && !strings.HasPrefix(err.Error(), "MOVED") {
		t.Fatal(err)
	}
	return err == nil
}
