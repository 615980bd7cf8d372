package fleet_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// onServerAndCluster runs test as subtests "server" (one redis-server) and
// "cluster" (a real 3-node Cluster), each with the Options that reach it
// (Addrs, and Cluster for the second): what the fleet promises over one
// Redis it promises over a Cluster too.
func onServerAndCluster(t *testing.T, test func(t *testing.T, o redisstore.Options)) {
	t.Helper()
	t.Run("server", func(t *testing.T) {
		srv := redistest.StartServer(t)
		test(t, redisstore.Options{Addrs: []string{srv.Addr}})
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t)
		test(t, redisstore.Options{Addrs: cl.Addrs, Cluster: true})
	})
}
