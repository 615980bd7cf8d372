package main

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// The limits of the test's rules. The exact, soft and hard rules are
// buckets refilling a day's rate: over the seconds the test runs they
// refill less than one unit, so their limit is the burst; the windowed
// hard rule expires its units every few seconds.
const (
	dayLimit     = 300
	syncInterval = 10 * time.Millisecond
	windowLimit  = 100
	windowPeriod = 3 * time.Second
)

const fleetProcConfig = `listen: 127.0.0.1:0
log_level: warn
store:
  type: redis
  redis: {addrs: [%s], cluster: %v, timeout: 2s}
rules:
  - name: exact
    rate: %[3]d/d
    algorithm: gcra
  - name: soft
    rate: %[3]d/d
    algorithm: gcra
    sync: %[4]v
  - name: hard
    rate: %[3]d/d
    algorithm: gcra
    lease: auto
  - name: hard-window
    rate: %[5]d/%[6]v
    algorithm: fixed_window
    lease: auto
`

// TestFleetProcesses runs three `sluice serve` processes on one real
// redis-server with an exact rule, a soft one (sync) and two hard ones
// (lease), drives them over HTTP, and checks each mode's bound, that every
// daemon's /metrics shows each rule's mode and its fleet counters moving,
// and that a SIGKILLed instance never lets the fleet pass a hard limit
// (its leases expire with the window).
func TestFleetProcesses(t *testing.T) {
	fleetProcesses(t, []string{redistest.StartServer(t).Addr}, false)
}

// TestFleetProcessesCluster is the same on a real 3-node Redis Cluster.
func TestFleetProcessesCluster(t *testing.T) {
	fleetProcesses(t, redistest.StartCluster(t).Addrs, true)
}

func fleetProcesses(t *testing.T, addrs []string, cluster bool) {
	cfg := fmt.Sprintf(fleetProcConfig, strings.Join(addrs, ", "), cluster, dayLimit, syncInterval, windowLimit, windowPeriod)
	path := writeConfig(t, cfg)
	const n = 3
	var procs []*sluiceProc
	var apis []string
	for range n {
		p := startSluiceProc(t, path)
		procs = append(procs, p)
		apis = append(apis, p.api)
	}
	start := time.Now()
	// allowance is a day bucket's limit over the time the test has run:
	// the burst plus what it refilled (less than one unit).
	allowance := func() int {
		return dayLimit + int(math.Ceil(dayLimit*time.Since(start).Seconds()/(24*time.Hour).Seconds()))
	}

	t.Run("exact", func(t *testing.T) {
		got := drive(t, apis, "exact", "k", 2*dayLimit, 12)
		if got < dayLimit || got > allowance() {
			t.Errorf("exact: the fleet admitted %d of %d, want exactly %d", got, 2*dayLimit, dayLimit)
		}
	})

	t.Run("lease", func(t *testing.T) {
		got := drive(t, apis, "hard", "k", 3*dayLimit, 12)
		t.Logf("lease auto: the fleet admitted %d of %d asked, limit %d", got, 3*dayLimit, dayLimit)
		if a := allowance(); got > a {
			t.Errorf("lease: the fleet admitted %d, over the limit %d", got, a)
		}
		if got < dayLimit*9/10 {
			t.Errorf("lease: the fleet admitted %d of %d at 3× overload, under 90%%", got, dayLimit)
		}
	})

	t.Run("sync", func(t *testing.T) { syncRounds(t, procs) })

	// Every daemon shows every rule's mode, and each mode's counters moved
	// on each (each got a third of every run above).
	for i, p := range procs {
		m := p.metrics(t)
		for rule, mode := range map[string]string{"exact": "exact", "soft": "sync", "hard": "lease", "hard-window": "lease"} {
			if s := fmt.Sprintf(`sluice_rule_fleet_mode{mode=%q,rule=%q}`, mode, rule); m[s] != 1 {
				t.Errorf("daemon %d: %s = %v, want 1", i, s, m[s])
			}
		}
		iv := fmt.Sprintf(`{interval=%q}`, syncInterval)
		for _, s := range []string{"sluice_fleet_sync_batches_total", "sluice_fleet_sync_batch_keys_total", "sluice_fleet_sync_decisions_total", "sluice_fleet_sync_loads_total", "sluice_fleet_sync_batch_seconds_count", "sluice_fleet_sync_batch_size_count"} {
			if m[s+iv] < 1 {
				t.Errorf("daemon %d: %s%s = %v, want it moving", i, s, iv, m[s+iv])
			}
		}
		for _, s := range []string{"sluice_fleet_lease_reservations_total", "sluice_fleet_lease_units_granted_total", "sluice_fleet_lease_units_spent_total", "sluice_fleet_lease_reserve_seconds_count"} {
			if m[s+`{chunk="auto"}`] < 1 {
				t.Errorf(`daemon %d: %s{chunk="auto"} = %v, want it moving`, i, s, m[s+`{chunk="auto"}`])
			}
		}
		if m["sluice_overlimit_cache_hits_total"] < 1 {
			t.Errorf("daemon %d: sluice_overlimit_cache_hits_total = %v, want some (every rule ran over)", i, m["sluice_overlimit_cache_hits_total"])
		}
	}

	t.Run("lease-sigkill", func(t *testing.T) { leaseKill(t, procs) })
}

// syncRounds measures the soft bound deterministically. The documented
// bound is (n−1)/n · λ · (2·interval + RTT): what the other instances send
// while an instance's view lacks their hits. Here that time is made a
// count: in each round every daemon gets k requests at once, then the test
// waits until every daemon has sent its hits to Redis and dropped its view
// of the key (three batches of its own after the round, kept coming by a
// request on another key), so that every round starts from a view holding
// every earlier hit. The requests the fleet sends while a view is stale are
// then one round's, n·k, and the fleet passes the limit by at most
// (n−1)/n · n·k = (n−1)·k; and, every view being at most the true count,
// it admits at least the limit.
func syncRounds(t *testing.T, procs []*sluiceProc) {
	// 7 a round on each of 3: the limit of 300 falls inside the 15th
	// round (after 294), so that round passes it, by up to (n−1)·k.
	const k, rounds = 7, 16
	n := len(procs)
	batches := func(p *sluiceProc) float64 {
		return p.metrics(t)[fmt.Sprintf(`sluice_fleet_sync_batches_total{interval=%q}`, syncInterval)]
	}
	admitted := 0
	for r := range rounds {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, p := range procs {
			for range k {
				wg.Go(func() {
					a, err := fleetCheck(t, p.api, "soft", "k")
					if err != nil {
						t.Errorf("soft: %v", err)
					}
					if a.Allowed {
						mu.Lock()
						admitted++
						mu.Unlock()
					}
				})
			}
		}
		wg.Wait()
		// Three batches of each daemon: one maybe under way at the end of
		// the round, the one that sends the rest of its hits, and the one
		// after, which drops the key's view (untouched for a batch), so
		// that its next decision reads the key again from Redis.
		for i, p := range procs {
			wg.Go(func() {
				base := batches(p)
				deadline := time.Now().Add(30 * time.Second) // a hang guard
				for poll := 0; batches(p) < base+3; poll++ {
					// Three times on a key of its own (never near its
					// limit, however long the wait): the first two are
					// decided in Redis (a key's first, then the one that
					// makes it an entry), the third on the entry's view,
					// a hit that the next batch must send. With two, a
					// batch had nothing to send unless the entry's view
					// was an interval old: about one poll in eight.
					for range 3 {
						if _, err := fleetCheck(t, p.api, "soft", fmt.Sprintf("tick-%d-%d-%d", r, i, poll)); err != nil {
							t.Error(err)
							return
						}
					}
					if time.Now().After(deadline) {
						t.Errorf("daemon %d: fewer than 3 sync batches in 30s", i)
						return
					}
					time.Sleep(syncInterval) // polling for the batches
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
	}
	bound := (n - 1) * k
	t.Logf("sync %v, %d daemons, rounds of %d requests each: admitted %d of %d asked, limit %d: overshoot %d (%.1f%%), bound (n−1)·k = %d",
		syncInterval, n, k, admitted, rounds*n*k, dayLimit, admitted-dayLimit, 100*float64(admitted-dayLimit)/dayLimit, bound)
	if admitted > dayLimit+bound+1 { // +1: a unit refilled while the test ran
		t.Errorf("sync: the fleet admitted %d, over the limit %d by more than the bound %d", admitted, dayLimit, bound)
	}
	if admitted < dayLimit {
		t.Errorf("sync: the fleet admitted %d, under the limit %d", admitted, dayLimit)
	}
}

// leaseKill drives the windowed hard rule on the three daemons at about 4×
// its rate, SIGKILLs one once the fleet has admitted a third of a window's
// limit (it dies holding reserved units), and keeps going on the other two
// until a window begun after the kill has admitted 90 % of the limit and
// ended: the dead instance's units expired with their window. No window
// may pass the limit. An admission is counted in the window whose end its
// answer's reset_after names: the end lies between the request's sending
// and its answer, plus reset_after (windows end at multiples of the period
// on the machine's clock, which the daemons and Redis share; a leasing
// daemon reads it through its estimate of Redis' clock, off by up to a
// reservation's round trip, so the span is widened by a quarter window).
// An admission whose widened span holds two window ends is ambiguous: it
// is left out of the per-window counts, which then count only admissions
// certainly in their window (so a count over the limit is certainly a
// window over it), and logged.
func leaseKill(t *testing.T, procs []*sluiceProc) {
	period := windowPeriod.Milliseconds()
	// windowOf returns the first and last window whose end fits a's
	// widened span.
	windowOf := func(a fleetAnswer) (first, last int64) {
		lo, hi := a.sent.UnixMilli()+a.ResetAfterMS-period/4, a.got.UnixMilli()+a.ResetAfterMS+period/4
		return (lo+period-1)/period - 1, hi/period - 1
	}
	var (
		mu        sync.Mutex
		ambiguous int
		byWindow  = map[int64]int{}
		killed    atomic.Bool
		killedIn  int64 = math.MaxInt64
		recovered       = make(chan int64, 1)
		total     int
	)
	victim := procs[len(procs)-1]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // a hang guard
	defer cancel()
	tick := time.NewTicker(windowPeriod / (4 * windowLimit))
	defer tick.Stop()
	var wg sync.WaitGroup
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			wg.Wait()
			t.Fatalf("no window after the kill (in window %d) admitted 90%% of %d within 60s: %v", killedIn, windowLimit, byWindow)
		case w := <-recovered:
			wg.Wait()
			t.Logf("lease auto, fixed window %d/%v: killed daemon %d in window %d; window %d admitted %d; per window: %v; %d admissions ambiguous (answers too slow to tell their window)",
				windowLimit, windowPeriod, victim.cmd.Process.Pid, killedIn, w, byWindow[w], byWindow, ambiguous)
			for w, a := range byWindow {
				if a > windowLimit {
					t.Errorf("window %d: the fleet admitted %d, over the limit %d", w, a, windowLimit)
				}
			}
			return
		case <-tick.C:
		}
		p := procs[i%len(procs)]
		if killed.Load() && p == victim {
			continue
		}
		wg.Go(func() {
			a, err := fleetCheck(t, p.api, "hard-window", "k")
			if err != nil {
				if p == victim && killed.Load() {
					return // in flight when it died
				}
				t.Errorf("hard-window: %v", err)
				return
			}
			if !a.Allowed {
				return
			}
			first, w := windowOf(a)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case first == w:
				byWindow[w]++
			case first < w:
				ambiguous++
			default:
				t.Errorf("an answer's reset_after_ms %d names no window end near its request and its answer", a.ResetAfterMS)
				return
			}
			total++
			if total == windowLimit/3 && !killed.Load() {
				killed.Store(true)
				killedIn = w // the later, if ambiguous: windows after it began after the kill
				victim.kill(t)
			}
			// Done once a window after the kill's has admitted 90 %
			// and a later one has begun (its answers still in flight
			// are counted before the check).
			for v, a := range byWindow {
				if v > killedIn && v < w && a >= windowLimit*9/10 {
					select {
					case recovered <- v:
					default:
					}
				}
			}
		})
	}
}
