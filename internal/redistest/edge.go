package redistest

import (
	"testing"
	"time"
)

// ClearOfWindowEdge returns once no window of period (windows aligned on
// the Unix epoch, as Sluice's fixed windows and counters are) ends within
// need from now: if one does, it waits for that window to end. A test that
// counts in one window of a rule decided on Redis's clock, which it cannot
// move, calls it first, so that the window does not end under it (a day's
// window at midnight UTC, an hour's on the hour). The servers run on this
// machine: Redis's clock is the local one. It waits at most need (and a
// millisecond), and only when the test starts that close to an edge.
func ClearOfWindowEdge(tb testing.TB, period, need time.Duration) {
	tb.Helper()
	if need <= 0 || need > period/2 {
		tb.Fatalf("redistest: ClearOfWindowEdge(%v, %v): need must be in (0, period/2]", period, need)
	}
	if w := clearOfEdge(time.Now, time.Sleep, period, need); w > 0 {
		tb.Logf("redistest: waited %v for the %v window to end (it ended within the %v the test needs)", w.Round(time.Millisecond), period, need)
	}
}

// clearOfEdge sleeps until now is clear of period's next edge by need, and
// returns how long it slept. Past the edge by a millisecond: Redis's TIME
// has microseconds, and the edge itself belongs to the next window.
func clearOfEdge(now func() time.Time, sleep func(time.Duration), period, need time.Duration) time.Duration {
	var slept time.Duration
	for {
		left := period - time.Duration(now().UnixNano()%int64(period))
		if left > need {
			return slept
		}
		sleep(left + time.Millisecond)
		slept += left + time.Millisecond
	}
}
