package sluice_test

import (
	"errors"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// maxHorizonUS is 2^52 µs (about 142.7 years): how far ahead of now a
// decision may reach (see Limit).
const maxHorizonUS = 1 << 52

// TestLongLimitsAreSane: a limit Validate accepts gives sane decisions
// under every algorithm, even after the largest forced charge: no negative
// or overflowed RetryAfter, ResetAfter or Delay, and a state at rest no
// sooner than the debt it holds has drained (a store forgets the key then).
// Limits whose state would outlast a time.Duration used to be accepted and
// answered negative waits; memstore forgot their keys at once (the instant
// of rest overflowed), admitting every request.
func TestLongLimitsAreSane(t *testing.T) {
	day := 24 * time.Hour
	us := time.Microsecond
	limits := []sluice.Limit{
		sluice.Every(1, 106751*day),
		sluice.Every(1, 106751*day).WithBurst(1000),
		sluice.Every(1000, 100*365*day),
		sluice.Every(1, 365*day).WithBurst(sluice.MaxRate(365 * day)),
		sluice.PerDay(1).WithBurst(sluice.MaxRate(day)),
		sluice.PerSecond(1).WithBurst(sluice.MaxRate(time.Second)),
		sluice.Every(1, us).WithBurst(sluice.MaxRate(us)),
		sluice.Every(1, (1<<50)*us),    // the longest period of a limit of 1 (its horizon 4 periods, 2^52 µs)
		sluice.Every(1, (1<<50+1)*us),  // one microsecond more
		sluice.Every(1000, 70*365*day), // the horizon about 2.002 periods: 140 years
		sluice.Every(1000, 72*365*day), // 144 years
		sluice.Every(10, 3650*day).WithBurst(100_000),
		sluice.Every(100_000, 3650*day).WithBurst(10),
		sluice.Every(9, 50*365*day).WithSegments(9),
	}
	now := time.Unix(1_700_000_000, 0)
	for _, l := range limits {
		if err := l.Validate(); err != nil {
			if !errors.Is(err, sluice.ErrInvalidLimit) {
				t.Errorf("%v burst %d: Validate() = %v, want ErrInvalidLimit", l, l.Burst, err)
			}
			continue
		}
		for _, a := range sluice.Algorithms() {
			if a == sluice.SlidingWindowLog && l.Rate > 1000 {
				continue // a log of that many times: not the point here
			}
			if refusesBurst(a, l) {
				continue // a window takes no burst
			}
			var st sluice.State
			steps := []struct {
				cost  int64
				force bool
				at    time.Duration
			}{{l.BurstOrRate(), false, 0}, {1, false, us}, {math.MaxInt64, true, 2 * us}, {1, false, time.Hour}, {0, false, 2 * time.Hour}}
			for i, s := range steps {
				at := now.Add(s.at)
				var d sluice.Decision
				var idle time.Time
				var err error
				if s.force {
					d, idle, err = a.Charge(&st, l, at, s.cost)
				} else {
					d, idle, err = a.Take(&st, l, at, s.cost)
				}
				if err != nil {
					t.Fatalf("%v %v burst %d step %d: %v", a, l, l.Burst, i, err)
				}
				if d.Remaining < 0 || d.ResetAfter < 0 || d.Delay < 0 || d.RetryAfter < 0 && d.RetryAfter != sluice.Never {
					t.Errorf("%v %v burst %d step %d (cost %d): %+v, want no negative figure", a, l, l.Burst, i, s.cost, d)
				}
				// A tick (at most a thousandth of the period) of slack: at
				// is rounded down to whole ticks.
				if idle.Add(l.Period / 1000).Before(at.Add(d.ResetAfter)) {
					t.Errorf("%v %v burst %d step %d (cost %d): at rest at %v, before its reset %v later", a, l, l.Burst, i, s.cost, idle, d.ResetAfter)
				}
			}
		}
	}
}

// TestHorizonBound: Validate refuses exactly the limits whose decisions
// could reach past 2^52 µs ahead, naming the bound, and the config key at
// fault comes first (a burst that alone makes it too long says so).
func TestHorizonBound(t *testing.T) {
	us := time.Microsecond
	day := 24 * time.Hour
	ok := []sluice.Limit{
		sluice.Every(1, (1<<50)*us),
		sluice.Every(3, (3<<49)*us), // 2.67 periods: 2^52 µs exactly
		sluice.Every(1000, 70*365*day),
		sluice.PerSecond(1).WithBurst(1 << 30),
	}
	for _, l := range ok {
		if err := l.Validate(); err != nil {
			t.Errorf("%v burst %d: Validate() = %v, want nil", l, l.Burst, err)
		}
	}
	for _, tc := range []struct {
		l    sluice.Limit
		want string
	}{
		{sluice.Every(1, (1<<50+1)*us), "1/312749h58m26.842625s is too long"},
		{sluice.Every(1000, 72*365*day), "1000/26280d is too long"},
		{sluice.Every(1, 106751*day), "1/106751d is too long"},
		{sluice.PerSecond(1).WithBurst(1 << 40), "burst 1099511627776 is too large for 1/s"},
		{sluice.PerDay(1).WithBurst(sluice.MaxRate(day)), "burst 1042499913742 is too large for 1/d"},
	} {
		err := tc.l.Validate()
		if !errors.Is(err, sluice.ErrInvalidLimit) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "2^52 µs") {
			t.Errorf("%v burst %d: Validate() = %v, want ErrInvalidLimit saying %q and the bound 2^52 µs", tc.l, tc.l.Burst, err, tc.want)
		}
	}
	if _, err := sluice.ParseLimit("1/36500d"); err == nil || !strings.Contains(err.Error(), "too long") {
		t.Errorf(`ParseLimit("1/36500d") = %v, want too long`, err)
	}
}

// TestTimeRange: the algorithms decide at MinTime and MaxTime and refuse
// times outside, the zero time.Time among them. Before 1970 a new key was
// not new: GCRA refused the first request of a fresh key at 1969-12-31.
func TestTimeRange(t *testing.T) {
	l := sluice.PerSecond(5)
	for _, a := range sluice.Algorithms() {
		for _, ok := range []time.Time{sluice.MinTime, sluice.MaxTime, time.Unix(1_700_000_000, 0)} {
			var st sluice.State
			if d, _, err := a.Take(&st, l, ok, 5); err != nil || !d.Allowed {
				t.Errorf("%v: Take(fresh, cost 5) at %v = %+v, %v; want allowed", a, ok, d, err)
			}
		}
		for _, bad := range []time.Time{{}, sluice.MinTime.Add(-time.Microsecond), time.Date(1969, 12, 31, 0, 0, 0, 0, time.UTC), sluice.MaxTime.Add(time.Microsecond)} {
			var st sluice.State
			if _, _, err := a.Take(&st, l, bad, 1); !errors.Is(err, sluice.ErrInvalidTime) {
				t.Errorf("%v: Take at %v: error %v, want ErrInvalidTime", a, bad, err)
			}
			if _, _, err := a.Charge(&st, l, bad, 1); !errors.Is(err, sluice.ErrInvalidTime) {
				t.Errorf("%v: Charge at %v: error %v, want ErrInvalidTime", a, bad, err)
			}
			var d sluice.Decision
			if _, err := a.TakeMicro(&d, &st, &l, bad.UnixMicro(), 1); !errors.Is(err, sluice.ErrInvalidTime) {
				t.Errorf("%v: TakeMicro at %v: error %v, want ErrInvalidTime", a, bad, err)
			}
			if st.T != 0 || st.N != 0 || st.M != 0 || st.Log != nil {
				t.Errorf("%v: refused at %v, the state moved to %+v", a, bad, st)
			}
		}
	}
	if err := sluice.CheckTime(time.Time{}); err == nil || !strings.Contains(err.Error(), "was Now set?") {
		t.Errorf("CheckTime(zero) = %v, want a hint about Now", err)
	}
}

// TestFarBehindNoOverflow: a request whose clock is a day behind a GCRA or
// leaky bucket state at a rate of 9×10^12/s meets a debt of a day × rate,
// past 2^63: it used to overflow, and GCRA admitted it with a Remaining
// above the burst and a negative ResetAfter. It is refused, counts
// nothing, and its waits run from its own clock.
func TestFarBehindNoOverflow(t *testing.T) {
	l := sluice.PerSecond(sluice.MaxRate(time.Second))
	t1 := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	back := 25 * time.Hour
	for _, a := range []sluice.Algorithm{sluice.GCRA, sluice.LeakyBucket} {
		var st sluice.State
		if _, _, err := a.Take(&st, l, t1, l.Rate); err != nil {
			t.Fatal(err)
		}
		if a == sluice.LeakyBucket { // fill the queue: the first request leaves at once
			if _, _, err := a.Take(&st, l, t1, l.Rate); err != nil {
				t.Fatal(err)
			}
		}
		before := st
		for _, force := range []bool{false, true} {
			take := a.Take
			if force {
				take = a.Charge
			}
			d, _, err := take(&st, l, t1.Add(-back), 1)
			if err != nil || d.Allowed || d.Remaining != 0 || d.RetryAfter < back || d.ResetAfter < back || d.Delay != 0 {
				t.Errorf("%v: request %v behind (force %v) = %+v, %v; want refused, Remaining 0, waits over %v", a, back, force, d, err, back)
			}
			if st.T != before.T || st.N != before.N || st.M != before.M {
				t.Errorf("%v: request %v behind (force %v) moved the state from %+v to %+v", a, back, force, before, st)
			}
		}
	}
}

// TestSlidingLogRateBound: the sliding log keeps one time per unit
// admitted, in memory, so a request of cost n appends n times: at a rate of
// 10^8, one request of cost 10^8 allocated 800 MB. Its rate is bounded by
// MaxLogRate (8 MB a key), refused naming the bound, by every entry point:
// Take, NewLimiter, and Algorithm.ValidateLimit (which the config uses).
func TestSlidingLogRateBound(t *testing.T) {
	big := sluice.Every(sluice.MaxLogRate+1, time.Hour)
	var st sluice.State
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	_, _, err := sluice.SlidingWindowLog.Take(&st, big, time.Unix(1_700_000_000, 0), big.Rate)
	runtime.ReadMemStats(&ms1)
	if !errors.Is(err, sluice.ErrInvalidLimit) || !strings.Contains(err.Error(), "at most 1000000") {
		t.Errorf("SlidingWindowLog.Take(%v, cost %d) error = %v, want ErrInvalidLimit naming the bound 1000000", big, big.Rate, err)
	}
	if grew := ms1.TotalAlloc - ms0.TotalAlloc; grew > 1<<20 {
		t.Errorf("SlidingWindowLog.Take(%v, cost %d) allocated %d bytes", big, big.Rate, grew)
	}
	if err := sluice.SlidingWindowLog.ValidateLimit(big); !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Errorf("SlidingWindowLog.ValidateLimit(%v) = %v, want ErrInvalidLimit", big, err)
	}
	if _, err := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.SlidingWindowLog, big); !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Errorf("NewLimiter(sliding_window_log, %v) error = %v, want ErrInvalidLimit", big, err)
	}
	ok := sluice.Every(sluice.MaxLogRate, time.Hour)
	for _, a := range sluice.Algorithms() {
		if err := a.ValidateLimit(ok); err != nil {
			t.Errorf("%v.ValidateLimit(%v) = %v, want nil", a, ok, err)
		}
		if err := a.ValidateLimit(big); (err != nil) != (a == sluice.SlidingWindowLog) {
			t.Errorf("%v.ValidateLimit(%v) = %v", a, big, err)
		}
	}
}
