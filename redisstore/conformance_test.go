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
	s, err := connect(o)
	if err != nil {
		t.Fatalf("redisstore.New(%v): %v", o.Addrs, err)
	}
	t.Cleanup(s.Close)
	return s
}

// connect is redisstore.New with open's generous timeout unless o says
// otherwise, for the tests that check New's error: with the default
// (50ms, the dial's bound too) a loaded machine failed the dial itself
// ("dial tcp: i/o timeout") where the test waits for ErrAuth or a
// connected store.
func connect(o redisstore.Options) (*redisstore.Store, error) {
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	return redisstore.New(context.Background(), o)
}

func TestConformanceSingleNode(t *testing.T) {
	srv := redistest.StartServer(t)
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}})
	sluicetest.Run(t, func(*testing.T) sluice.Store { return s })
}

func TestConformanceCluster(t *testing.T) {
	t.Parallel() // a Cluster of its own: its start overlaps another test
	c := redistest.StartCluster(t)
	s := open(t, redisstore.Options{Addrs: c.Addrs, Cluster: true})
	sluicetest.Run(t, func(*testing.T) sluice.Store { return s })
}
