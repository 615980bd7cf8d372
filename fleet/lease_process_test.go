package fleet_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
)

// evalCalls is how many scripts addr has run (INFO commandstats).
func evalCalls(t testing.TB, addr string) int64 {
	t.Helper()
	info, err := redistest.Do(addr, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"cmdstat_evalsha:", "cmdstat_eval:"} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd); ok {
				calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
				v, _ := strconv.ParseInt(calls, 10, 64)
				n += v
			}
		}
	}
	return n
}

// TestLeaseProcesses measures the hard bound: 3 processes with `lease: auto`
// on one Redis at 10x overload. No window may pass the limit; the window
// the run covers whole must get at least 90% of it; Redis must run at most
// 0.3 scripts per decision (counted by Redis itself).
func TestLeaseProcesses(t *testing.T) {
	t.Parallel() // worker processes on a Redis (or Cluster) and a key of their own, for seconds of real time
	srv := redistest.StartServer(t)
	leaseProcesses(t, []string{srv.Addr}, false)
}

func TestLeaseProcessesCluster(t *testing.T) {
	t.Parallel() // worker processes on a Redis (or Cluster) and a key of their own, for seconds of real time
	c := redistest.StartCluster(t)
	leaseProcesses(t, c.Addrs, true)
}

func leaseProcesses(t *testing.T, addrs []string, cluster bool) {
	const n, overload = 3, 10
	c, long := processConfig(t)
	for _, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			before := int64(0)
			for _, a := range addrs {
				before += evalCalls(t, a)
			}
			lambda := overload * float64(c.limit.Rate) / c.limit.Period.Seconds()
			sp := workerSpec{Addrs: addrs, Cluster: cluster, Mode: "lease", Algorithm: alg, Limit: c.limit,
				Key: fmt.Sprintf("lprocs/%d/%s", time.Now().UnixNano(), alg), Rate: lambda, Start: startAt(c, long), Duration: c.duration}
			rs := runWorkers(t, n, sp)
			scripts := -before
			for _, a := range addrs {
				scripts += evalCalls(t, a)
			}
			tot := fleetTotal(rs)
			decisions, admitted, calls := tot.Decisions, tot.Admitted, tot.Calls
			windows, first, last := tot.ByWindow, tot.First, tot.Last
			perDecision := float64(scripts) / float64(decisions)
			R := c.limit.Rate
			t.Logf("%s %v, lease auto, %d processes at %dx: %d decisions, %d admitted, %d reservations, %d scripts in Redis: %.3f per decision",
				alg, c.limit, n, overload, decisions, admitted, calls, scripts, perDecision)
			if perDecision > 0.3 {
				t.Errorf("%.3f Redis scripts per decision, want at most 0.3", perDecision)
			}
			switch alg {
			case sluice.FixedWindow:
				p := c.limit.Period.Microseconds()
				full := sp.Start.UnixMicro()/p + 1
				if long {
					full--
				}
				for w, a := range windows {
					t.Logf("window %d: admitted %d of %d (%.1f%%), %d sent", w, a, R, 100*float64(a)/float64(R), tot.SentByWindow[w])
					if a > R {
						t.Errorf("window %d: admitted %d, over the limit %d", w, a, R)
					}
					// A window sent fewer than 90% of the limit (the
					// workers fell behind their schedule on a loaded
					// machine) admits them all: units held elsewhere
					// refuse none before the limit is reserved.
					if sentW := tot.SentByWindow[w]; w == full && a < min(R*9/10, sentW) {
						t.Errorf("window %d (covered whole): admitted %d of %d sent, under 90%% of %d", w, a, sentW, R)
					}
				}
			default:
				// Within burst + rate × the time admissions span, plus the
				// tick of the last refill.
				allowance := float64(R) + float64(R)*last.Sub(first).Seconds()/c.limit.Period.Seconds()
				exact := exactAdmits(t, alg, c.limit, tot.At)
				t.Logf("admitted %d over %v, allowance %.0f (%.1f%%); of the %d sent an exact limiter admits %d", admitted, last.Sub(first).Round(time.Millisecond), allowance, 100*float64(admitted)/allowance, decisions, exact)
				if float64(admitted) > allowance+1 {
					t.Errorf("admitted %d, over the allowance %.0f", admitted, allowance)
				}
				// Not under 90% of what an exact limiter admits of the
				// requests sent: the allowance when they came steadily,
				// less when a loaded machine held the workers back.
				if float64(admitted) < 0.9*float64(exact) {
					t.Errorf("admitted %d of %d sent, under 90%% of the %d an exact limiter admits of them (allowance %.0f)", admitted, decisions, exact, allowance)
				}
			}
		})
	}
}
