package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// open returns a Store, closed when the test ends. Unless o says otherwise
// its timeout is generous: these tests check decisions on a loaded CI
// machine under -race; failure_test.go checks the timeout itself.
func open(t testing.TB, o redisstore.Options) *redisstore.Store {
	t.Helper()
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	s, err := redisstore.New(context.Background(), o)
	if err != nil {
		t.Fatalf("redisstore.New(%v): %v", o.Addrs, err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestConformanceSingleNode(t *testing.T) {
	srv := redistest.StartServer(t)
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}})
	sluicetest.Run(t, func(*testing.T) sluice.Store { return s })
}

func TestConformanceCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	s := open(t, redisstore.Options{Addrs: c.Addrs, Cluster: true})
	sluicetest.Run(t, func(*testing.T) sluice.Store { return s })
}
