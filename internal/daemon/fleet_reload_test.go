package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/redisstore"
)

// reloadConfig is generation i of the config of TestFleetReloadRetires:
// steady (sync: 1m) and held (lease: 10) never change; soft and hard
// change their limit (so their keys) with every generation, and cycle
// through sharing steady's interval and held's chunk (i%3 == 0), having
// an interval and a chunk of their own (i%3 == 1), and being removed
// (i%3 == 2).
func reloadConfig(addr string, i int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `
listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], timeout: 5s}
rules:
  - name: steady
    rate: 1000/d
    algorithm: fixed_window
    sync: 1m
  - name: held
    rate: 1000/d
    algorithm: fixed_window
    lease: 10
`, addr)
	sync, chunk := "1m", 10
	switch i % 3 {
	case 1:
		sync, chunk = fmt.Sprintf("%ds", 10+i), 5+i
	case 2:
		return b.String()
	}
	fmt.Fprintf(&b, `  - name: soft
    rate: %d/d
    algorithm: fixed_window
    sync: %s
  - name: hard
    rate: %d/d
    algorithm: fixed_window
    lease: %d
`, 1000+i, sync, 1000+i, chunk)
	return b.String()
}

// probeRedis opens a Redis store on addr as the daemon does (Redis time),
// to read counts with a cost-0 Take.
func probeRedis(t *testing.T, addr string) *redisstore.Store {
	t.Helper()
	st, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{addr}, Timeout: 5 * time.Second, RedisTime: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// counted is how many requests Redis has counted on rule's key k (a
// fixed window): its rate minus what a cost-0 Take says is left.
func counted(t *testing.T, st *redisstore.Store, rule *rules.Rule, k string) int64 {
	t.Helper()
	return countedKey(t, st, rule.StoreKey(k), rule.Algorithm, rule.Limit)
}

// countedKey is counted for a store key and its algorithm and limit.
func countedKey(t *testing.T, st *redisstore.Store, key string, alg sluice.Algorithm, limit sluice.Limit) int64 {
	t.Helper()
	d, err := st.Take(context.Background(), sluice.Request{Key: key, Algorithm: alg, Limit: limit, Now: time.Now()})
	if err != nil {
		t.Fatalf("probe %s in Redis: %v", key, err)
	}
	return limit.Rate - d.Remaining
}

// fleetSizes is what the fleet store keeps: routing entries, Syncs (one
// batch loop each) and Leases.
func fleetSizes(f *fleetStore) (heads, syncs, leases int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.routes.Load().modes), len(f.syncs), len(f.leases)
}

// syncLoops counts the goroutines running a Sync's batch loop.
func syncLoops() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return bytes.Count(buf[:n], []byte("fleet.(*Sync).loop("))
		}
		buf = make([]byte, 2*len(buf))
	}
}

// TestFleetReloadRetires reloads a daemon on Redis many times through its
// config file, changing and removing a sync and a lease rule: what the
// fleet store keeps (routing entries, Syncs and their batch loops,
// Leases) does not grow with the reloads; the hits a removed or changed
// sync rule admitted locally reach Redis, and the units a removed or
// changed lease rule held go back to it; the rules no reload changes keep
// their state (their hits still pending, their units still held, their
// next decisions local).
func TestFleetReloadRetires(t *testing.T) {
	// Its fixed windows count in days since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, 24*time.Hour, 2*time.Minute)
	rs := redistest.StartServer(t)
	probe := probeRedis(t, rs.Addr)
	loops := syncLoops() // of earlier tests, ending
	// Its Syncs batch and keep their views on an hour, not on the rules'
	// minute (or less): what a reload must not send stays unsent, and a
	// view fresh, however long a loaded machine takes over the test (its
	// deadline comes first). The hits and units a reload must send and
	// give back go at the reload, whatever the interval.
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(reloadConfig(rs.Addr, 0)), 0o644); err != nil {
		t.Fatal(err)
	}
	td := startDaemonWith(t, path, func(o *Options) { o.syncLoop = func(time.Duration) time.Duration { return time.Hour } })
	f := td.d.fleet
	steadySync := func() *fleet1m { f.mu.Lock(); defer f.mu.Unlock(); return &fleet1m{f.syncs[time.Minute], f.leases[10]} }
	before := steadySync()
	gen := td.d.cur.Load().rules
	steady, held := gen.Rule("steady"), gen.Rule("held")
	// steady: the first two decided in Redis (cold, then the entry's
	// first read), three locally, pending until a batch. held: the first
	// decided in Redis, the second reserves 10 and spends one, the third
	// spends one: 11 counted, 8 held.
	if n := allowedOf(t, td.api, "steady", "k", 5); n != 5 {
		t.Fatalf("steady: %d of 5 allowed", n)
	}
	if n := allowedOf(t, td.api, "held", "k", 3); n != 3 {
		t.Fatalf("held: %d of 3 allowed", n)
	}
	if got := counted(t, probe, held, "k"); got != 11 {
		t.Fatalf("held: Redis counts %d, want 11 (one decided there, 10 reserved)", got)
	}
	const reloads = 9
	for i := range reloads + 1 {
		cur := td.d.cur.Load().rules
		soft, hard := cur.Rule("soft"), cur.Rule("hard")
		if soft != nil {
			for _, rule := range []string{"soft", "hard"} {
				if n := allowedOf(t, td.api, rule, "k", 5); n != 5 {
					t.Fatalf("generation %d: %s: %d of 5 allowed", i, rule, n)
				}
			}
		}
		if i == reloads {
			break
		}
		replaceFile(t, td.path, reloadConfig(rs.Addr, i+1))
		if r := td.waitReload(); r.Err != nil {
			t.Fatalf("reload %d: %v", i+1, r.Err)
		}
		if soft == nil {
			continue
		}
		// Generation i's soft and hard are gone (new limits, or removed):
		// Redis has every request they admitted, no more.
		if got := counted(t, probe, soft, "k"); got != 5 {
			t.Errorf("reload %d: soft of generation %d: Redis counts %d, want the 5 admitted (hits admitted locally must be sent)", i+1, i, got)
		}
		if got := counted(t, probe, hard, "k"); got != 5 {
			t.Errorf("reload %d: hard of generation %d: Redis counts %d, want the 5 admitted (units held must go back)", i+1, i, got)
		}
	}
	heads, syncs, leases := fleetSizes(f)
	// The last generation (9, 9%3 == 0) has all four rules, on one
	// interval and one chunk.
	if heads != 4 || syncs != 1 || leases != 1 {
		t.Errorf("after %d reloads: %d routing entries, %d Syncs, %d Leases; want 4, 1 and 1 (those of the rules in force)", reloads, heads, syncs, leases)
	}
	waitFor(t, "one sync batch loop", func() bool { return syncLoops() <= loops+syncs })

	// The unchanged rules kept their decorators and their state.
	if after := steadySync(); *after != *before {
		t.Errorf("the decorators of the unchanged rules were replaced: %+v, then %+v", *before, *after)
	}
	if got := counted(t, probe, steady, "k"); got != 2 {
		t.Errorf("steady: Redis counts %d, want 2: its 3 local hits are not due before a batch (a reload sent them)", got)
	}
	if got := counted(t, probe, held, "k"); got != 11 {
		t.Errorf("held: Redis counts %d, want still 11 (its units stay held)", got)
	}
	loads, local := td.metric("sluice_fleet_sync_loads_total", "interval", "1m0s"), td.metric("sluice_fleet_sync_decisions_total", "interval", "1m0s")
	calls := td.metric("sluice_fleet_lease_reservations_total", "chunk", "10")
	if n := allowedOf(t, td.api, "steady", "k", 1); n != 1 {
		t.Fatalf("steady after the reloads: not allowed")
	}
	if n := allowedOf(t, td.api, "held", "k", 1); n != 1 {
		t.Fatalf("held after the reloads: not allowed")
	}
	// The view is fresh for two of the Sync's intervals.
	if l, d := td.metric("sluice_fleet_sync_loads_total", "interval", "1m0s"), td.metric("sluice_fleet_sync_decisions_total", "interval", "1m0s"); l != loads || d != local+1 {
		t.Errorf("steady after the reloads: loads %v → %v, local decisions %v → %v; want the view kept: no load, one local decision", loads, l, local, d)
	}
	if c := td.metric("sluice_fleet_lease_reservations_total", "chunk", "10"); c != calls {
		t.Errorf("held after the reloads: reservations %v → %v, want none: its units are still held", calls, c)
	}
}

// fleet1m is the decorators the unchanged rules of TestFleetReloadRetires
// use.
type fleet1m struct {
	sync  *fleet.Sync
	lease *fleet.Lease
}

// TestFleetReloadInFlight reloads a busy rule's mode back and forth
// (sync on two intervals, lease in two chunks) while requests run, then
// removes it: requests still deciding on a decorator the reload retires
// must not be lost, so Redis ends with exactly the requests admitted, every
// local hit sent and every unit held given back.
func TestFleetReloadInFlight(t *testing.T) {
	// Its fixed windows count in days since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, 24*time.Hour, 2*time.Minute)
	rs := redistest.StartServer(t)
	probe := probeRedis(t, rs.Addr)
	conf := func(mode string) string {
		c := fmt.Sprintf("listen: 127.0.0.1:0\nstore:\n  type: redis\n  redis: {addrs: [%s], timeout: 5s}\nrules:\n  - name: other\n    rate: 10/d\n", rs.Addr)
		if mode != "" {
			c += "  - name: busy\n    rate: 1000000/d\n    algorithm: fixed_window\n    " + mode + "\n"
		}
		return c
	}
	td := startDaemon(t, conf("sync: 1m"))
	busy := td.d.cur.Load().rules.Rule("busy")
	var admitted atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := client.Post(td.api+"/v1/check", "application/json", strings.NewReader(`{"rule":"busy","key":"k"}`))
				if err != nil {
					t.Errorf("POST /v1/check: %v", err)
					return
				}
				var a checkAnswer
				err = json.NewDecoder(resp.Body).Decode(&a)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK && err == nil && a.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	modes := []string{"sync: 30s", "lease: 50", "lease: 20", "sync: 1m"}
	for i := range 24 {
		// Some requests on each mode, besides those running meanwhile.
		admitted.Add(int64(allowedOf(t, td.api, "busy", "k", 10)))
		replaceFile(t, td.path, conf(modes[i%len(modes)]))
		if r := td.waitReload(); r.Err != nil {
			t.Fatalf("reload %d: %v", i+1, r.Err)
		}
	}
	replaceFile(t, td.path, conf(""))
	if r := td.waitReload(); r.Err != nil {
		t.Fatalf("reload removing busy: %v", r.Err)
	}
	close(stop)
	wg.Wait()
	if got, want := counted(t, probe, busy, "k"), admitted.Load(); got != want {
		t.Errorf("Redis counts %d requests of busy, want the %d admitted", got, want)
	}
	if heads, syncs, leases := fleetSizes(td.d.fleet); heads != 1 || syncs != 0 || leases != 0 {
		t.Errorf("after busy's removal: %d routing entries, %d Syncs, %d Leases; want 1, 0 and 0", heads, syncs, leases)
	}
}

// gatedRedis holds the first Sync call made after arm until release.
type gatedRedis struct {
	fleetShared
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (g *gatedRedis) Sync(ctx context.Context, ops []redisstore.SyncOp) error {
	if g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		<-g.release
	}
	return g.fleetShared.Sync(ctx, ops)
}

// TestFleetRetireWaitsForDecisions: a reload that removes a sync rule
// while one of its decisions is under way (here, reading the key before
// charging a report locally) retires the rule's Sync only once that
// decision has ended, so its hit is sent, not recorded into a Sync whose
// last batch has gone.
func TestFleetRetireWaitsForDecisions(t *testing.T) {
	st, lazy := connectedRedis(t)
	g := &gatedRedis{fleetShared: lazy, entered: make(chan struct{}), release: make(chan struct{})}
	f := newFleetStore(g, nil, nil)
	t.Cleanup(func() { f.Close() })
	compile := func(specs ...rules.Spec) *rules.Set {
		set, err := rules.Compile("retire.yaml", append(specs, rules.Spec{Name: "exact", Rate: "10/h"}))
		if err != nil {
			t.Fatal(err)
		}
		return set
	}
	set := compile(rules.Spec{Name: "soft", Rate: "100/h", Algorithm: "fixed_window", Sync: time.Minute})
	configureFleet(t, f, set)
	soft := set.Rule("soft")
	r := sluice.Request{Key: soft.StoreKey("k"), Algorithm: soft.Algorithm, Limit: soft.Limit, Cost: 1, Now: time.Now(), Force: true}
	g.armed.Store(true)
	took := make(chan error, 1)
	go func() {
		_, err := f.Take(context.Background(), r)
		took <- err
	}()
	<-g.entered
	next, err := f.prepare(compile(), nil)
	if err != nil {
		t.Fatal(err)
	}
	used := make(chan error, 1)
	go func() { used <- f.use(next) }()
	waitFor(t, "the new routes in force", func() bool { return f.routes.Load() == next })
	if _, syncs, _ := fleetSizes(f); syncs != 1 {
		t.Errorf("the Sync of the removed rule was retired while its decision ran (%d Syncs left)", syncs)
	}
	close(g.release)
	if err := <-took; err != nil {
		t.Fatalf("Take: %v", err)
	}
	if err := <-used; err != nil {
		t.Fatalf("use: %v", err)
	}
	if _, syncs, _ := fleetSizes(f); syncs != 0 {
		t.Errorf("%d Syncs after the decision ended, want the removed rule's retired", syncs)
	}
	probe := r
	probe.Cost, probe.Force = 0, false
	if d, err := st.Take(context.Background(), probe); err != nil || d.Remaining != 99 {
		t.Errorf("Redis after the reload: %+v, %v; want 99 left (the report charged during the reload sent)", d, err)
	}
}
