package daemon

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/redisstore"
)

// TestFleetMixedAllOrNothing: requests matching an exact rule and a fleet
// rule (sync, or lease) at once, decided concurrently on a real Redis
// while the fleet rule runs out: the exact rule counts exactly the
// requests admitted, never one the fleet rule denied, and the fleet rule
// admits exactly its limit (one instance decides exactly in both modes).
func TestFleetMixedAllOrNothing(t *testing.T) {
	st, lazy := connectedRedis(t)
	f := newFleetStore(lazy, nil, nil)
	t.Cleanup(func() { f.Close() })
	set, err := rules.Compile("mixed.yaml", []rules.Spec{
		{Name: "exact", Rate: "1000/h", Algorithm: "fixed_window"},
		{Name: "soft", Rate: "20/h", Algorithm: "fixed_window", Sync: 20 * time.Millisecond},
		{Name: "hard", Rate: "20/h", Algorithm: "fixed_window", Lease: rules.AutoCount{Auto: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	configureFleet(t, f, set)
	req := func(rule, key string) sluice.Request {
		r := set.Rule(rule)
		return sluice.Request{Key: r.StoreKey(key), Algorithm: r.Algorithm, Limit: r.Limit, Cost: 1, Now: time.Now()}
	}
	for _, fleetRule := range []string{"soft", "hard"} {
		key := "k-" + fleetRule
		var mu sync.Mutex
		var wg sync.WaitGroup
		admitted := 0
		for range 8 {
			wg.Go(func() {
				for range 25 {
					rs := []sluice.Request{req("exact", key), req(fleetRule, key)}
					ds := make([]sluice.Decision, 2)
					if err := f.TakeAll(context.Background(), rs, ds); err != nil {
						t.Error(err)
						return
					}
					if sluice.AllAllowed(ds) {
						mu.Lock()
						admitted++
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		if admitted != 20 {
			t.Errorf("%s: %d of 200 requests admitted, want the fleet rule's 20", fleetRule, admitted)
		}
		probe := req("exact", key)
		probe.Cost = 0
		d, err := st.Take(context.Background(), probe)
		if err != nil {
			t.Fatal(err)
		}
		if counted := 1000 - d.Remaining; counted != int64(admitted) {
			t.Errorf("%s: the exact rule counted %d requests in Redis, want the %d admitted (a request denied by the %s rule consumed from it)", fleetRule, counted, admitted, fleetRule)
		}
	}
}

// configureFleet puts set's rules in force in f, as a reload does.
func configureFleet(t *testing.T, f *fleetStore, set *rules.Set) {
	t.Helper()
	rt, err := f.prepare(set, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.use(rt); err != nil {
		t.Fatal(err)
	}
}

// connectedRedis is a store on a fresh Redis and a lazyRedis already
// holding it.
func connectedRedis(t *testing.T) (*redisstore.Store, *lazyRedis) {
	t.Helper()
	srv := redistest.StartServer(t)
	st, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	lazy := &lazyRedis{}
	lazy.s.Store(st)
	return st, lazy
}
