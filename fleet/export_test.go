package fleet

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
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

// reconnect asks st until both its clients answer (they reconnect on
// their own), for at most 10s: a ping, and a lone query of another key.
func reconnect(t *testing.T, st *redisstore.Store) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	q := sluice.Request{Key: "reconnect", Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(1), Now: sluicetest.T0}
	for {
		err := st.Ping(context.Background())
		if err == nil {
			_, err = st.Take(context.Background(), q)
		}
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Ping still failing after 10s: %v", err)
		}
	}
}

// Reconnect is reconnect for the external tests.
var Reconnect = reconnect

// Age makes the views of s's keys look d older, as if d had passed since
// they were read: aged two intervals, a key is read again before its next
// decision. It stands for the wall clock a Sync reads, which a test with a
// real Redis cannot move.
func (s *Sync) Age(d time.Duration) {
	s.mu.Lock()
	es := make([]*syncEntry, 0, len(s.keys))
	for _, e := range s.keys {
		es = append(es, e)
	}
	s.mu.Unlock()
	for _, e := range es {
		e.mu.Lock()
		if !e.synced.IsZero() {
			e.synced = e.synced.Add(-d)
		}
		e.mu.Unlock()
	}
}
