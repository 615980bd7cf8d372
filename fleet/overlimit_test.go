package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// overLimits are the limits of the differential tests: integer and
// fractional spacings, bursts above and below the rate, segments, and a
// limit that counts in ticks of 10 µs.
var overLimits = []sluice.Limit{
	sluice.PerSecond(5),
	sluice.PerSecond(3),
	sluice.Every(7, 10*time.Millisecond),
	sluice.PerSecond(10).WithBurst(2),
	sluice.Every(3, time.Second).WithBurst(8),
	sluice.PerMinute(10).WithSegments(4),
	sluice.Every(9, 1200*time.Millisecond).WithSegments(3),
	sluice.PerDay(1_000_000),
}

// traceStep is one request of a differential trace: Take on key (or, with
// pair, TakeAll on key and the other key).
type traceStep struct {
	at   time.Duration
	key  int
	cost int64
	pair bool
}

// overloadTrace returns n requests on 2 keys at several times the limit's
// rate: runs at one instant, gaps shorter than the spacing, sometimes long
// gaps and rarely a step back in time; costs mostly 1, sometimes anything
// up to past the capacity, sometimes 0; a tenth are TakeAlls over both keys.
// With back false, time never goes backwards.
func overloadTrace(rng *rand.Rand, n int, l sluice.Limit, back bool) []traceStep {
	per := max(int64(l.Period)/l.Rate, int64(time.Microsecond))
	capacity := max(l.Rate, l.BurstOrRate()) + 1
	var at time.Duration
	out := make([]traceStep, n)
	for i := range out {
		switch x := rng.IntN(20); {
		case x < 6:
		case x < 12:
			at += time.Duration(rng.Int64N(per/4)/1000+1) * time.Microsecond
		case x < 17:
			at += time.Duration(rng.Int64N(2*per)/1000+1) * time.Microsecond
		case x < 19:
			at += time.Duration(rng.Int64N(int64(l.Period))/1000+1) * time.Microsecond
		default:
			if back {
				at -= time.Duration(rng.Int64N(per)/1000) * time.Microsecond
			}
		}
		cost := int64(1)
		switch x := rng.IntN(20); {
		case x < 1:
			cost = 0
		case x < 4:
			cost = rng.Int64N(capacity + 2)
		}
		out[i] = traceStep{at: at, key: rng.IntN(2), cost: cost, pair: rng.IntN(10) == 0}
	}
	return out
}

// differential replays overload traces through plain and through an
// OverLimitCache over cachedInner (a store of its own, or the same store
// under other keys), and requires the same verdict for every request; for
// requests the cache answered it checks the figures against the store's.
// When both stores take within a bound (sluice.WithinTaker), every third
// leaky bucket request goes through TakeWithin on both, under a bound of
// 0 to 4 spacings: the same verdict and lateness too. It returns how many
// requests the cache answered and how many calls reached cachedInner.
func differential(t *testing.T, plain, cachedInner sluice.Store, steps int) (hits, calls uint64) {
	t.Helper()
	ctx := context.Background()
	sd := sluicetest.Seed(t)
	counted := &countingStore{Store: cachedInner}
	c := fleet.NewOverLimitCache(counted, fleet.OverLimitOptions{})
	pw, within := plain.(sluice.WithinTaker)
	if _, ok := cachedInner.(sluice.WithinTaker); !ok {
		within = false
	}
	run := time.Now().UnixNano()
	for _, alg := range sluice.Algorithms() {
		for li, l := range overLimits {
			if l.Segments > 1 && alg != sluice.SlidingWindowCounter || l.Burst != 0 && !alg.TakesBurst() {
				continue // segments are the counter's, a burst the buckets'
			}
			rng := rand.New(rand.NewPCG(sd, uint64(li)*16+uint64(alg)))
			tick := int64(1)
			if tk, err := l.Ticks(); err == nil {
				tick = tk.Tick
			}
			key := func(k int) string { return fmt.Sprintf("ol/%d/%v/%d/%d", run, alg, li, k) }
			base := sluicetest.T0.Add(time.Duration(rng.Int64N(int64(time.Hour))) / time.Microsecond * time.Microsecond)
			// The cache's argument needs a monotone clock per key (the
			// daemon's Redis time): a refused request moves a key's clock
			// forward, and one the cache answers does not.
			const back = false
			for i, st := range overloadTrace(rng, steps, l, back) {
				now := base.Add(st.at)
				r := sluice.Request{Key: key(st.key), Algorithm: alg, Limit: l, Cost: st.cost, Now: now}
				if i%13 == 5 {
					// A report: never answered from the cache, and it
					// must keep every remembered refusal exact.
					r.Force, r.Cost = true, int64(i%7)*max(1, l.Rate/3)
				}
				call := fmt.Sprintf("%v %v step %d (seed %d) at +%v cost %d force %v", alg, l, i, sd, st.at, r.Cost, r.Force)
				before := c.Hits()
				if os.Getenv("SLUICE_TRACE") == fmt.Sprint(alg) {
					t.Logf("%s pair=%v key=%d", call, st.pair, st.key)
				}
				if st.pair {
					rs := []sluice.Request{r, r}
					rs[1].Key = key(1 - st.key)
					want, got := make([]sluice.Decision, 2), make([]sluice.Decision, 2)
					if err := plain.TakeAll(ctx, rs, want); err != nil {
						t.Fatalf("%s: plain TakeAll: %v", call, err)
					}
					if err := c.TakeAll(ctx, rs, got); err != nil {
						t.Fatalf("%s: cached TakeAll: %v", call, err)
					}
					if sluice.AllAllowed(got) != sluice.AllAllowed(want) {
						t.Fatalf("%s: TakeAll allowed %v through the cache, %v plain (%+v vs %+v)", call, sluice.AllAllowed(got), sluice.AllAllowed(want), got, want)
					}
					if c.Hits() != before {
						for j := range got {
							if !got[j].Allowed && want[j].Allowed {
								t.Fatalf("%s: TakeAll request %d refused by the cache, allowed plain", call, j)
							}
						}
					}
					continue
				}
				var want, got sluice.Decision
				var err error
				if within && alg == sluice.LeakyBucket && !r.Force && i%3 == 1 {
					bound := time.Duration(i%5) * l.Period / time.Duration(l.Rate)
					call += fmt.Sprintf(" within %v", bound)
					var wantLate, gotLate bool
					if want, wantLate, err = pw.TakeWithin(ctx, r, bound); err != nil {
						t.Fatalf("%s: plain TakeWithin: %v", call, err)
					}
					if got, gotLate, err = c.TakeWithin(ctx, r, bound); err != nil {
						t.Fatalf("%s: cached TakeWithin: %v", call, err)
					}
					if gotLate != wantLate {
						t.Fatalf("%s: late %v through the cache, %v plain (%+v vs %+v)", call, gotLate, wantLate, got, want)
					}
				} else {
					if want, err = plain.Take(ctx, r); err != nil {
						t.Fatalf("%s: plain Take: %v", call, err)
					}
					if got, err = c.Take(ctx, r); err != nil {
						t.Fatalf("%s: cached Take: %v", call, err)
					}
				}
				if got.Allowed != want.Allowed {
					t.Fatalf("%s: allowed %v through the cache, %v plain (%+v vs %+v)", call, got.Allowed, want.Allowed, got, want)
				}
				if c.Hits() == before {
					if got != want {
						t.Fatalf("%s: the cache passed the store's decision on changed: %+v, want %+v", call, got, want)
					}
					continue
				}
				if r.Force {
					t.Fatalf("%s: a report was answered from the cache: %+v", call, got)
				}
				if !back {
					checkHit(t, call, got, want, r.Cost, tick)
				}
			}
		}
	}
	return c.Hits(), counted.calls()
}

// checkHit checks a decision the cache made against the store's.
func checkHit(t *testing.T, call string, got, want sluice.Decision, cost, tick int64) {
	t.Helper()
	slack := time.Duration(tick-1) * time.Microsecond
	switch {
	case got.Limit != want.Limit:
		t.Fatalf("%s: cached Limit %d, want %d", call, got.Limit, want.Limit)
	case want.RetryAfter == sluice.Never && got.RetryAfter != sluice.Never:
		t.Fatalf("%s: cached RetryAfter %v, the store says never", call, got.RetryAfter)
	case want.RetryAfter != sluice.Never && (got.RetryAfter < 0 || got.RetryAfter > want.RetryAfter):
		t.Fatalf("%s: cached RetryAfter %v, longer than the store's %v", call, got.RetryAfter, want.RetryAfter)
	case got.ResetAfter > want.ResetAfter+slack:
		t.Fatalf("%s: cached ResetAfter %v, longer than the store's %v", call, got.ResetAfter, want.ResetAfter)
	}
	// A refusal of cost 1 leaves the key untouched until it ends: the
	// figures are the store's own.
	if cost == 1 && tick == 1 && got != want {
		t.Fatalf("%s: cached %+v, want the store's %+v", call, got, want)
	}
}

// countingStore counts the calls that reach a store.
type countingStore struct {
	sluice.Store
	mu sync.Mutex
	n  uint64
}

func (s *countingStore) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	s.mu.Lock()
	s.n++
	s.mu.Unlock()
	return s.Store.Take(ctx, r)
}

func (s *countingStore) TakeAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	s.mu.Lock()
	s.n++
	s.mu.Unlock()
	return s.Store.TakeAll(ctx, rs, ds)
}

// TakeWithin counts and passes the call on (sluice.WithinTaker); over a
// store without it, it answers errors.ErrUnsupported, uncounted.
func (s *countingStore) TakeWithin(ctx context.Context, r sluice.Request, within time.Duration) (sluice.Decision, bool, error) {
	wt, ok := s.Store.(sluice.WithinTaker)
	if !ok {
		return sluice.Decision{}, false, errors.ErrUnsupported
	}
	s.mu.Lock()
	s.n++
	s.mu.Unlock()
	return wt.TakeWithin(ctx, r, within)
}

func (s *countingStore) calls() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// TestOverLimitDifferentialReference runs the differential against the
// reference algorithms, with many steps: it is the fast, thorough check of
// the exactness argument for every algorithm.
func TestOverLimitDifferentialReference(t *testing.T) {
	hits, calls := differential(t, sluicetest.NewReference(), sluicetest.NewReference(), 500)
	if hits == 0 {
		t.Fatal("the cache answered nothing: the traces do not overload")
	}
	t.Logf("%d requests answered by the cache, %d reached the store", hits, calls)
}

// scriptCalls returns the Lua script calls a Redis executed successfully,
// from INFO commandstats: each Take or TakeAll of redisstore is one.
func scriptCalls(t *testing.T, addr string) int64 {
	t.Helper()
	info, err := redistest.Do(addr, "INFO", "commandstats")
	if err != nil {
		t.Fatalf("INFO commandstats on %s: %v", addr, err)
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		name, fields, ok := strings.Cut(line, ":")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval") {
			continue
		}
		var calls, failed int64
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			x, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				calls = x
			case "failed_calls":
				failed = x
			}
		}
		n += calls - failed
	}
	return n
}

// TestOverLimitDifferentialRedis replays the traces on two real Redis
// servers, one plain and one behind the cache: the same verdict for every
// request, and the cache's server runs exactly one script per request the
// cache did not answer (INFO commandstats).
func TestOverLimitDifferentialRedis(t *testing.T) {
	plainSrv, cachedSrv := redistest.StartServer(t), redistest.StartServer(t)
	plain := fleet.OpenRedis(t, redisstore.Options{Addrs: []string{plainSrv.Addr}})
	cached := fleet.OpenRedis(t, redisstore.Options{Addrs: []string{cachedSrv.Addr}})
	// Counted from here: opening a store runs a script of its own (the
	// ACL probe of redisstore.New).
	plainBase, cachedBase := scriptCalls(t, plainSrv.Addr), scriptCalls(t, cachedSrv.Addr)
	hits, calls := differential(t, plain, cached, 400)
	plainCalls, cachedCalls := scriptCalls(t, plainSrv.Addr)-plainBase, scriptCalls(t, cachedSrv.Addr)-cachedBase
	t.Logf("plain: %d scripts; through the cache: %d scripts, %d requests answered by the cache", plainCalls, cachedCalls, hits)
	if int64(calls) != cachedCalls {
		t.Errorf("the cache's Redis ran %d scripts, want one per call that reached it (%d)", cachedCalls, calls)
	}
	if plainCalls-cachedCalls != int64(hits) {
		t.Errorf("plain Redis ran %d scripts and the cache's %d: %d saved, want the %d requests the cache answered", plainCalls, cachedCalls, plainCalls-cachedCalls, hits)
	}
	if hits < uint64(plainCalls)/10 {
		t.Errorf("the cache answered %d of %d requests: the traces do not overload", hits, plainCalls)
	}
}

// TestOverLimitDifferentialCluster is the differential on a real 3-node
// Redis Cluster, plain and cached under different keys of one cluster:
// TakeAlls there span slots.
func TestOverLimitDifferentialCluster(t *testing.T) {
	t.Parallel() // a Cluster (or Redis) and stores of its own
	cl := redistest.StartCluster(t)
	plain := fleet.OpenRedis(t, redisstore.Options{Addrs: cl.Addrs, Cluster: true, Prefix: "plain:"})
	cached := fleet.OpenRedis(t, redisstore.Options{Addrs: cl.Addrs, Cluster: true, Prefix: "cached:"})
	hits, calls := differential(t, plain, cached, 200)
	if hits == 0 {
		t.Fatal("the cache answered nothing on the cluster")
	}
	t.Logf("%d requests answered by the cache, %d reached the cluster", hits, calls)
}

// TestOverLimitTables runs the conformance step tables through the cache
// over Redis: their figures come out as the store's.
func TestOverLimitTables(t *testing.T) {
	srv := redistest.StartServer(t)
	c := fleet.NewOverLimitCache(fleet.OpenRedis(t, redisstore.Options{Addrs: []string{srv.Addr}}), fleet.OverLimitOptions{})
	for _, tb := range sluicetest.Tables() {
		t.Run(tb.Name, func(t *testing.T) { sluicetest.RunTable(t, c, tb) })
	}
}

// TestOverLimitForgetsAfterStoreFailure: Redis restarted without its data
// admits again at once, and so does the cache, which forgot its refusals
// when Redis failed.
func TestOverLimitForgetsAfterStoreFailure(t *testing.T) {
	srv := redistest.StartServer(t)
	c := fleet.NewOverLimitCache(fleet.OpenRedis(t, redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 5 * time.Second}), fleet.OverLimitOptions{})
	ctx := context.Background()
	r := sluice.Request{Key: "k", Algorithm: sluice.FixedWindow, Limit: sluice.PerMinute(1), Cost: 1, Now: sluicetest.T0}
	for i, want := range []bool{true, false, false} {
		d, err := c.Take(ctx, r)
		if err != nil || d.Allowed != want {
			t.Fatalf("Take #%d = %+v, %v; want allowed %v", i, d, err, want)
		}
	}
	if c.Hits() != 1 {
		t.Fatalf("Hits = %d after a refusal and a repeat, want 1", c.Hits())
	}
	srv.Stop()
	if _, err := c.Take(ctx, sluice.Request{Key: "other", Algorithm: sluice.FixedWindow, Limit: sluice.PerMinute(1), Cost: 1, Now: sluicetest.T0}); err == nil {
		t.Fatal("Take with Redis stopped: no error")
	}
	srv.Restart()
	for {
		d, err := c.Take(ctx, r)
		if err != nil { // the client reconnects on its own
			continue
		}
		if !d.Allowed {
			t.Fatalf("after Redis restarted empty: %+v, want the cache to have forgotten the refusal", d)
		}
		break
	}
	if c.Len() != 0 {
		t.Fatalf("Len = %d, want 0", c.Len())
	}
}

// TestOverLimitBounded: no more than MaxKeys refusals are kept, and a
// forgotten refusal is only a store call.
func TestOverLimitBounded(t *testing.T) {
	ref := sluicetest.NewReference()
	counted := &countingStore{Store: ref}
	c := fleet.NewOverLimitCache(counted, fleet.OverLimitOptions{MaxKeys: 640})
	ctx := context.Background()
	l := sluice.PerHour(1)
	for i := range 10_000 {
		r := sluice.Request{Key: strconv.Itoa(i), Algorithm: sluice.TokenBucket, Limit: l, Cost: 1, Now: sluicetest.T0}
		c.Take(ctx, r)
		for range 2 { // refused by the store, then by the cache
			if d, _ := c.Take(ctx, r); d.Allowed {
				t.Fatalf("key %d admitted twice in an hour", i)
			}
		}
		if n := c.Len(); n > 640 {
			t.Fatalf("after %d keys the cache holds %d, want at most 640", i+1, n)
		}
	}
	if c.Hits() != 10_000 || counted.calls() != 20_000 {
		t.Fatalf("Hits = %d, store calls %d; want 10000 and 20000", c.Hits(), counted.calls())
	}
}

// TestOverLimitConcurrent hammers a few keys from many goroutines through
// the cache over Redis (Redis time, as the daemon runs): the fleet-wide
// count never passes the limit, and most refusals are answered locally.
func TestOverLimitConcurrent(t *testing.T) {
	srv := redistest.StartServer(t)
	c := fleet.NewOverLimitCache(fleet.OpenRedis(t, redisstore.Options{Addrs: []string{srv.Addr}, RedisTime: true}), fleet.OverLimitOptions{})
	base := scriptCalls(t, srv.Addr) // opening the store ran its ACL probe
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := map[string]int{}
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				key := strconv.Itoa((g + i) % 3)
				d, err := c.Take(ctx, sluice.Request{Key: key, Algorithm: sluice.SlidingWindowLog, Limit: sluice.PerHour(20), Cost: 1, Now: time.Now()})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					mu.Lock()
					admitted[key]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for k, n := range admitted {
		if n != 20 {
			t.Errorf("key %s: %d admitted, want exactly the limit 20", k, n)
		}
	}
	if calls := scriptCalls(t, srv.Addr) - base; c.Hits() < 2000 || calls > 2400-int64(c.Hits()) {
		t.Errorf("%d hits, %d scripts for 2400 requests", c.Hits(), calls)
	}
}

// TestOverLimitNamespacesAndReset: a refusal belongs to its namespace, and
// Reset forgets it along with the key's state.
func TestOverLimitNamespacesAndReset(t *testing.T) {
	srv := redistest.StartServer(t)
	c := fleet.NewOverLimitCache(fleet.OpenRedis(t, redisstore.Options{Addrs: []string{srv.Addr}}), fleet.OverLimitOptions{})
	ctx := context.Background()
	r := sluice.Request{Namespace: "a/", Key: "k", Algorithm: sluice.GCRA, Limit: sluice.PerHour(1), Cost: 1, Now: sluicetest.T0}
	for i, want := range []bool{true, false, false} {
		if d, err := c.Take(ctx, r); err != nil || d.Allowed != want {
			t.Fatalf("namespace a, Take #%d = %+v, %v; want allowed %v", i, d, err, want)
		}
	}
	other := r
	other.Namespace = "b/"
	if d, err := c.Take(ctx, other); err != nil || !d.Allowed {
		t.Fatalf("namespace b = %+v, %v; want allowed (a's refusal is a's)", d, err)
	}
	if err := c.Reset(ctx, r); err != nil {
		t.Fatal(err)
	}
	if d, err := c.Take(ctx, r); err != nil || !d.Allowed {
		t.Fatalf("after Reset = %+v, %v; want allowed", d, err)
	}
	if c.Hits() != 1 {
		t.Fatalf("Hits = %d, want 1", c.Hits())
	}
}
