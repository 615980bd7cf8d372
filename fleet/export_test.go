package fleet

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/redisstore"
)

// openRedis returns a Redis store as o says, closed when the test ends.
// Unless o says otherwise its timeout is generous: these tests check
// decisions on a loaded machine under -race, not the timeout.
func openRedis(t testing.TB, o redisstore.Options) *redisstore.Store {
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

// OpenRedis is openRedis for the external tests (package fleet_test).
var OpenRedis = openRedis
