package fleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// The multi-process tests: n processes (this test binary, re-executed as
// TestHelperFleetWorker), each with its own Redis client and its own Sync
// or Lease, send requests for one key at a steady rate to one real Redis
// (or Cluster), and the parent adds up what the fleet admitted.
//
// By default they run a short configuration, a limit per 2 seconds. With
// SLUICE_FLEET_MEASURE=1 they run the per-minute figures of BENCHMARKS.md
// (about 10 s of load each, after waiting for enough of the current minute
// to be left).

// workerSpec is what the parent tells a worker, as JSON in SLUICE_FLEET_WORKER.
type workerSpec struct {
	Addrs     []string
	Cluster   bool
	Mode      string // "sync" or "lease"
	Algorithm sluice.Algorithm
	Limit     sluice.Limit
	Interval  time.Duration // sync
	Chunk     int64         // lease
	Key       string
	Rate      float64 // requests per second sent by this worker
	Start     time.Time
	Duration  time.Duration
}

// workerResult is what a worker prints.
type workerResult struct {
	Decisions, Admitted int64
	ByWindow            map[int64]int64 // admitted per window (fixed window)
	SentByWindow        map[int64]int64 // decisions per window (fixed window)
	At                  []int64         // each decision's instant, µs (see exactAdmits)
	First, Last         time.Time       // first and last admission
	MaxGap, MaxRTT      time.Duration   // sync: between batches, of a batch
	Batches, Calls      uint64          // sync batches, lease reservations
	Observed            int64           // sync: the most overshoot a batch saw
}

func TestHelperFleetWorker(t *testing.T) {
	raw := os.Getenv("SLUICE_FLEET_WORKER")
	if raw == "" {
		return // not a worker: the parent tests run the workers
	}
	var sp workerSpec
	if err := json.Unmarshal([]byte(raw), &sp); err != nil {
		t.Fatal(err)
	}
	rs, err := redisstore.New(context.Background(), redisstore.Options{Addrs: sp.Addrs, Cluster: sp.Cluster, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	res := workerResult{ByWindow: map[int64]int64{}, SentByWindow: map[int64]int64{}}
	var mu sync.Mutex
	var lastBatch time.Time
	var store sluice.Store
	var closeFn func() error
	var stats func()
	switch sp.Mode {
	case "sync":
		s, err := fleet.NewSync(rs, fleet.SyncOptions{Interval: sp.Interval, OnBatch: func(keys int, took time.Duration, err error) {
			mu.Lock()
			defer mu.Unlock()
			now := time.Now()
			if !lastBatch.IsZero() && now.Before(sp.Start.Add(sp.Duration)) {
				res.MaxGap = max(res.MaxGap, now.Sub(lastBatch))
			}
			lastBatch = now
			res.MaxRTT = max(res.MaxRTT, took)
		}})
		if err != nil {
			t.Fatal(err)
		}
		store, closeFn = s, s.Close
		stats = func() { st := s.Stats(); res.Batches, res.Observed = st.Batches, st.MaxOvershoot }
	case "lease":
		l, err := fleet.NewLease(rs, fleet.LeaseOptions{Chunk: sp.Chunk})
		if err != nil {
			t.Fatal(err)
		}
		store, closeFn = l, l.Close
		stats = func() { res.Calls = l.Stats().Calls }
	}
	time.Sleep(time.Until(sp.Start))
	// A ticker drops the ticks a slow receiver misses, so the worker never
	// sends faster than its rate to catch up.
	tick := time.NewTicker(time.Duration(float64(time.Second) / sp.Rate))
	defer tick.Stop()
	period := sp.Limit.Period
	for now := range tick.C {
		if now.Sub(sp.Start) >= sp.Duration {
			break
		}
		now = time.Now()
		d, err := store.Take(context.Background(), sluice.Request{Key: sp.Key, Algorithm: sp.Algorithm, Limit: sp.Limit, Cost: 1, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		res.Decisions++
		res.SentByWindow[now.UnixMicro()/period.Microseconds()]++
		res.At = append(res.At, now.UnixMicro())
		if d.Allowed {
			res.Admitted++
			res.ByWindow[now.UnixMicro()/period.Microseconds()]++
			if res.First.IsZero() {
				res.First = now
			}
			res.Last = now
		}
	}
	if err := closeFn(); err != nil {
		t.Fatal(err)
	}
	stats()
	mu.Lock()
	defer mu.Unlock()
	out, _ := json.Marshal(res)
	fmt.Printf("FLEETRESULT %s\n", out)
}

// runWorkers runs n workers of spec (Rate is the fleet's) and returns
// their results.
func runWorkers(t *testing.T, n int, sp workerSpec) []workerResult {
	t.Helper()
	sp.Rate /= float64(n)
	var wg sync.WaitGroup
	results := make([]workerResult, n)
	for i := range n {
		raw, _ := json.Marshal(sp)
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperFleetWorker$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "SLUICE_FLEET_WORKER="+string(raw))
		wg.Go(func() {
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Errorf("worker %d: %v\n%s", i, err, out)
				return
			}
			_, line, ok := strings.Cut(string(out), "FLEETRESULT ")
			line, _, _ = strings.Cut(line, "\n")
			if !ok || json.Unmarshal([]byte(line), &results[i]) != nil {
				t.Errorf("worker %d: no result in\n%s", i, out)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return results
}

// fleetTotal adds up the workers' results: counts summed, decisions and
// admissions per window summed, the first and last admission of any, the
// worst gap, batch and overshoot of any.
func fleetTotal(rs []workerResult) workerResult {
	tot := workerResult{ByWindow: map[int64]int64{}, SentByWindow: map[int64]int64{}, First: rs[0].First, Last: rs[0].Last}
	for _, r := range rs {
		tot.Decisions += r.Decisions
		tot.Admitted += r.Admitted
		tot.Batches += r.Batches
		tot.Calls += r.Calls
		tot.MaxGap, tot.MaxRTT = max(tot.MaxGap, r.MaxGap), max(tot.MaxRTT, r.MaxRTT)
		tot.Observed = max(tot.Observed, r.Observed)
		for w, a := range r.ByWindow {
			tot.ByWindow[w] += a
		}
		for w, n := range r.SentByWindow {
			tot.SentByWindow[w] += n
		}
		tot.At = append(tot.At, r.At...)
		if r.First.Before(tot.First) {
			tot.First = r.First
		}
		if r.Last.After(tot.Last) {
			tot.Last = r.Last
		}
	}
	return tot
}

// exactAdmits is how many of the requests sent at the instants at (µs, in
// any order) one exact limiter of alg and l admits: the most a fleet may
// admit of them, and what a bucket's lower bound is measured against. The
// allowance (burst + rate × the time the admissions span) assumes steady
// requests; a loaded machine stalls the workers for longer than the
// bucket takes to fill, and the refill of those stalls is lost to any
// limiter (a -race run sent 1,347 requests, the allowance 1,343, and a
// fleet of leases admitted 1,032).
func exactAdmits(t *testing.T, alg sluice.Algorithm, l sluice.Limit, at []int64) int64 {
	t.Helper()
	at = slices.Sorted(slices.Values(at))
	var st sluice.State
	var d sluice.Decision
	n := int64(0)
	for _, now := range at {
		if _, err := alg.TakeMicro(&d, &st, &l, now, 1); err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			n++
		}
	}
	return n
}

type processCase struct {
	limit    sluice.Limit
	interval time.Duration
	duration time.Duration
}

// processConfig is the short configuration, or the per-minute one.
func processConfig(t *testing.T) (processCase, bool) {
	if os.Getenv("SLUICE_FLEET_MEASURE") == "1" {
		return processCase{limit: sluice.PerMinute(1000), interval: 100 * time.Millisecond, duration: 10 * time.Second}, true
	}
	return processCase{limit: sluice.Every(400, 2*time.Second), interval: 10 * time.Millisecond, duration: 4200 * time.Millisecond}, false
}

// startAt returns when to start so that, for a long period, the run stays
// inside one window (a fresh key has its whole limit at any point of it).
func startAt(c processCase, long bool) time.Time {
	start := time.Now().Add(time.Second)
	if !long {
		return start
	}
	p := c.limit.Period
	end := start.Truncate(p).Add(p)
	if end.Sub(start) < c.duration+time.Second {
		start = end.Add(100 * time.Millisecond)
	}
	return start
}

// TestSyncProcesses measures the soft bound: 3 processes with `sync` on one
// Redis at 10x overload. Each window's admissions must stay within the
// limit plus the formula of Sync's documentation, computed with the largest
// gap between batches and the slowest batch the workers saw; the window the
// run covers whole must reach the limit (or admit all it was sent, when a
// loaded machine held the workers under the limit's rate).
func TestSyncProcesses(t *testing.T) {
	t.Parallel() // worker processes on a Redis (or Cluster) and a key of their own, for seconds of real time
	srv := redistest.StartServer(t)
	syncProcesses(t, []string{srv.Addr}, false)
}

func TestSyncProcessesCluster(t *testing.T) {
	t.Parallel() // worker processes on a Redis (or Cluster) and a key of their own, for seconds of real time
	c := redistest.StartCluster(t)
	syncProcesses(t, c.Addrs, true)
}

func syncProcesses(t *testing.T, addrs []string, cluster bool) {
	const n, overload = 3, 10
	c, long := processConfig(t)
	algs := []sluice.Algorithm{sluice.FixedWindow, sluice.GCRA}
	for _, alg := range algs {
		t.Run(alg.String(), func(t *testing.T) {
			lambda := overload * float64(c.limit.Rate) / c.limit.Period.Seconds()
			sp := workerSpec{Addrs: addrs, Cluster: cluster, Mode: "sync", Algorithm: alg, Limit: c.limit, Interval: c.interval,
				Key: fmt.Sprintf("procs/%d/%s", time.Now().UnixNano(), alg), Rate: lambda, Start: startAt(c, long), Duration: c.duration}
			rs := runWorkers(t, n, sp)
			tot := fleetTotal(rs)
			gap, rtt, decisions, admitted, observed := tot.MaxGap, tot.MaxRTT, tot.Decisions, tot.Admitted, tot.Observed
			windows, first, last := tot.ByWindow, tot.First, tot.Last
			// The formula, with the measured rate and the worst gap: the
			// interval as it really went.
			sent := float64(decisions) / c.duration.Seconds()
			bound := float64(n-1) / n * sent * (2*gap + rtt).Seconds()
			nominal := float64(n-1) / n * lambda * (2 * c.interval).Seconds()
			R := float64(c.limit.Rate)
			switch alg {
			case sluice.FixedWindow:
				full := int64(math.MaxInt64)
				p := c.limit.Period.Microseconds()
				if !long { // the first window the run covers whole
					full = sp.Start.UnixMicro()/p + 1
				} else {
					full = sp.Start.UnixMicro() / p
				}
				for w, a := range windows {
					over := float64(a) - R
					t.Logf("fixed_window %v, sync %v, %d processes at %dx (%.0f req/s sent): window %d admitted %d of %d sent: overshoot %.0f = %.2f%% of the limit; formula %.1f (%.2f%%) with the measured gap %v and batch %v, %.1f (%.2f%%) nominal; largest overshoot a batch saw %d",
						c.limit, c.interval, n, overload, sent, w, a, tot.SentByWindow[w], over, 100*over/R, bound, 100*bound/R, gap, rtt, nominal, 100*nominal/R, observed)
					if over > bound+n {
						t.Errorf("window %d: admitted %d, overshoot %.0f above the bound %.1f", w, a, over, bound)
					}
					// A view never counts more than Redis and this instance
					// admitted, so no request is refused below the limit:
					// a window sent fewer (the workers fell behind their
					// schedule: a -race run at a load average of 30 sent
					// 168 of the 2000 req/s) admits them all.
					if sentW := tot.SentByWindow[w]; w == full && a < min(c.limit.Rate, sentW) {
						t.Errorf("window %d (covered whole): admitted %d of %d sent, under the limit %d", w, a, sentW, c.limit.Rate)
					}
				}
			default: // buckets: within burst + rate × the time admissions span
				allowance := R + R*last.Sub(first).Seconds()/c.limit.Period.Seconds()
				over := float64(admitted) - allowance
				t.Logf("%s %v, sync %v, %d processes at %dx (%.0f req/s sent): admitted %d over %v, allowance %.0f: overshoot %.0f = %.2f%% of the limit; formula %.1f (%.2f%%) with the measured gap %v and batch %v, %.1f (%.2f%%) nominal; largest overshoot a batch saw %d",
					alg, c.limit, c.interval, n, overload, sent, admitted, last.Sub(first).Round(time.Millisecond), allowance, over, 100*over/R, bound, 100*bound/R, gap, rtt, nominal, 100*nominal/R, observed)
				if over > bound+n {
					t.Errorf("admitted %d, overshoot %.0f above the bound %.1f", admitted, over, bound)
				}
				// Not far under: a check that the fleet does admit, not a
				// measurement. On a loaded 2-core machine the workers fall
				// behind their schedule and stall for hundreds of ms (a
				// make test run at load average 19 sent 1315 of the 2000
				// req/s and admitted 11% under), so the bound is half the
				// limit below the allowance, or below what was sent when
				// that is less (at a load average of 30, 168 of the 2000
				// req/s); the figures above are logged for the docs.
				exact := exactAdmits(t, alg, c.limit, tot.At)
				t.Logf("of the %d sent an exact limiter admits %d", decisions, exact)
				if float64(admitted) < float64(exact)-R/2 {
					t.Errorf("admitted %d of %d sent, far under the %d an exact limiter admits of them (allowance %.0f)", admitted, decisions, exact, allowance)
				}
			}
		})
	}
}
