package sluice

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// Limit is an allowance: Rate requests per Period, with bursts of up to
// Burst. The zero value is invalid; build one with PerSecond, PerMinute,
// PerHour, PerDay, Every or ParseLimit.
//
// Burst 0 means Burst = Rate; only TokenBucket, GCRA and LeakyBucket take
// another (a window admits its Rate each period, and refuses a Burst other
// than the Rate: see Algorithm.ValidateLimit). Segments applies to
// SlidingWindowCounter only (0 means 1). Period must be a whole number of microseconds.
//
// Internally every algorithm counts time in integer ticks of one microsecond;
// when Burst (or Rate) × Period in microseconds would exceed 2^53 — past
// which a double, and so a Lua number in Redis, is no longer exact — the tick
// grows by powers of ten (10 µs, 100 µs, …) until it fits, which a limit such
// as 1,000,000/d needs. Validate reports limits that cannot fit at all.
//
// No decision may reach more than MaxHorizon (2^52 µs, about 142 years)
// ahead: twice the Period, and twice (Burst+1) × Period / Rate (a bucket's
// debt after a forced charge, drained at the rate), must stay within it.
// So a Period is at most about 71 years (35 for a rate and burst of 1),
// and a Burst far above the Rate refills within that time. Validate
// refuses the rest: their waits would not fit a time.Duration.
type Limit struct {
	Rate     int64         // requests admitted per Period; at least 1
	Period   time.Duration // length of the window or refill period
	Burst    int64         // bucket size (token, GCRA), queue size (leaky); 0 means Rate; the windows take no other
	Segments int           // sub-windows of a SlidingWindowCounter; 0 means 1
}

// PerSecond returns a limit of n requests per second.
func PerSecond(n int64) Limit { return Limit{Rate: n, Period: time.Second} }

// PerMinute returns a limit of n requests per minute.
func PerMinute(n int64) Limit { return Limit{Rate: n, Period: time.Minute} }

// PerHour returns a limit of n requests per hour.
func PerHour(n int64) Limit { return Limit{Rate: n, Period: time.Hour} }

// PerDay returns a limit of n requests per 24 hours.
func PerDay(n int64) Limit { return Limit{Rate: n, Period: 24 * time.Hour} }

// Every returns a limit of n requests per period d.
func Every(n int64, d time.Duration) Limit { return Limit{Rate: n, Period: d} }

// WithBurst returns l with Burst set to b.
func (l Limit) WithBurst(b int64) Limit { l.Burst = b; return l }

// WithSegments returns l with Segments set to s.
func (l Limit) WithSegments(s int) Limit { l.Segments = s; return l }

// BurstOrRate returns Burst, or Rate when Burst is 0.
func (l Limit) BurstOrRate() int64 {
	if l.Burst == 0 {
		return l.Rate
	}
	return l.Burst
}

// String formats l as ParseLimit reads it, such as "10/m" or "3/250ms".
func (l Limit) String() string {
	var unit string
	switch l.Period {
	case time.Second:
		unit = "s"
	case time.Minute:
		unit = "m"
	case time.Hour:
		unit = "h"
	case 24 * time.Hour:
		unit = "d"
	default:
		if l.Period > 0 && l.Period%(24*time.Hour) == 0 {
			unit = strconv.FormatInt(int64(l.Period/(24*time.Hour)), 10) + "d"
		} else {
			unit = l.Period.String()
		}
	}
	return strconv.FormatInt(l.Rate, 10) + "/" + unit
}

// ParseLimit reads "N/UNIT": N requests per UNIT, where UNIT is s, m, h, d,
// a whole number of days such as 7d, or a Go duration such as 250ms or 1m30s.
// Examples: "100/s", "5/m", "1000/h", "10/250ms".
func ParseLimit(s string) (Limit, error) {
	num, unit, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return Limit{}, fmt.Errorf("%w: %q: want N/UNIT, such as 100/s or 5/m", ErrInvalidLimit, s)
	}
	n, nerr := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if nerr != nil && !errors.Is(nerr, strconv.ErrRange) || nerr == nil && n < 1 || strings.HasPrefix(strings.TrimSpace(num), "-") {
		return Limit{}, fmt.Errorf("%w: %q: rate %q is not a whole number ≥ 1", ErrInvalidLimit, s, num)
	}
	d, err := parseUnit(strings.TrimSpace(unit))
	if err != nil {
		return Limit{}, fmt.Errorf("%w: %q: %v", ErrInvalidLimit, s, err)
	}
	if nerr != nil { // too large for an int64, and so for any period
		return Limit{}, fmt.Errorf("%w: %q: rate %s is too large (at most %d per %v)", ErrInvalidLimit, s, strings.TrimSpace(num), MaxRate(d), d)
	}
	l := Limit{Rate: n, Period: d}
	if err := l.Validate(); err != nil {
		return Limit{}, err
	}
	return l, nil
}

func parseUnit(u string) (time.Duration, error) {
	switch u {
	case "s":
		return time.Second, nil
	case "m":
		return time.Minute, nil
	case "h":
		return time.Hour, nil
	case "d":
		return 24 * time.Hour, nil
	case "":
		return 0, fmt.Errorf("missing unit (s, m, h, d or a duration such as 250ms)")
	}
	if days, ok := strings.CutSuffix(u, "d"); ok && wholeDigits(days) {
		// Bounded by what a Duration holds (about 106,751 days), the same
		// bound a Go duration such as 882288h meets, so that String's "Nd"
		// always reads back.
		n, err := strconv.ParseInt(days, 10, 64)
		if maxDays := math.MaxInt64 / int64(24*time.Hour); errors.Is(err, strconv.ErrRange) || n > maxDays {
			return 0, fmt.Errorf("unit %q is too large (at most %dd)", u, maxDays)
		}
		if err != nil || n < 1 {
			return 0, fmt.Errorf("unit %q: want a whole number of days such as 7d", u)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(u)
	if err != nil && strings.Contains(err.Error(), "invalid duration") && strings.IndexFunc(u, func(r rune) bool { return r >= '0' && r <= '9' }) == 0 {
		if _, err2 := time.ParseDuration("1" + strings.TrimLeft(u, "0123456789.")); err2 == nil {
			return 0, fmt.Errorf("unit %q is too large (at most %v)", u, time.Duration(math.MaxInt64))
		}
	}
	if err != nil {
		return 0, fmt.Errorf("unit %q is not s, m, h, d or a Go duration", u)
	}
	if d <= 0 {
		return 0, fmt.Errorf("unit %q must be positive", u)
	}
	return d, nil
}

// maxExact is 2^53: integers up to it are exact in a float64 (a Lua number).
const maxExact = 1 << 53

// wholeDigits reports whether s is a non-empty run of decimal digits.
func wholeDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// MaxRate is the largest rate (and burst) a limit of period can count
// exactly: every count must stay a whole number of ticks within 2^53 (the
// integers a float64, and so a Lua number in Redis, holds exactly), with
// ticks of at most a thousandth of the period. It is 0 for a period that is
// not a positive whole number of microseconds.
func MaxRate(period time.Duration) int64 {
	if period < time.Microsecond || period%time.Microsecond != 0 {
		return 0
	}
	p := int64(period / time.Microsecond)
	for p%10 == 0 && p/10 >= 1000 {
		p /= 10
	}
	return maxExact/p - 1
}

// maxSegments bounds Segments, and with it the state of a sliding window
// counter and the work of one decision.
const maxSegments = 1024

// Validate reports whether l can be enforced, wrapping ErrInvalidLimit.
func (l Limit) Validate() error {
	var p params
	return l.paramsTo(&p)
}

// params are a Limit in ticks: everything an algorithm step needs.
type params struct {
	rate, burst int64 // burst already defaulted
	period      int64 // in ticks
	segments    int64 // ≥ 1
	tick        int64 // microseconds per tick: 1, 10, 100, …
}

// paramsTo validates l and writes it in ticks to *p. It takes pointers
// because it runs on every decision: copying these structs by value costs
// more than the checks.
func (l *Limit) paramsTo(p *params) error {
	// The common case first, in one branch: a valid limit of one segment
	// whose largest count × period stays under 2^53 ticks of 1µs. The
	// checks below decide everything else and word the errors.
	q := int64(l.Period / time.Microsecond)
	// The horizon (see horizon) is then at most 2^52 µs: under 2^50 it is
	// at most 2^51 µs; with a rate of 4 or more, (max(2^50, full) + full)
	// / rate ≤ 2^54 / 4, and 2 × period ≤ 2 × 2^53 / 5.
	if l.Rate >= 1 && l.Burst >= 0 && uint(l.Segments) <= 1 && q >= 1 && time.Duration(q)*time.Microsecond == l.Period {
		burst := l.Burst
		if burst == 0 {
			burst = l.Rate
		}
		big := max(l.Rate, burst) + 1
		if hi, lo := bits.Mul64(uint64(big), uint64(q)); hi == 0 && (lo <= 1<<50 || lo <= maxExact && l.Rate >= 4) {
			p.rate, p.burst, p.period, p.segments, p.tick = l.Rate, burst, q, 1, 1
			return nil
		}
	}
	return l.paramsSlow(p)
}

// paramsSlow is paramsTo for every limit.
func (l *Limit) paramsSlow(p *params) error {
	if l.Rate < 1 {
		return fmt.Errorf("%w: rate %d must be at least 1", ErrInvalidLimit, l.Rate)
	}
	if l.Burst < 0 {
		return fmt.Errorf("%w: burst %d must not be negative", ErrInvalidLimit, l.Burst)
	}
	if l.Segments < 0 || l.Segments > maxSegments {
		return fmt.Errorf("%w: segments %d must be between 1 and %d", ErrInvalidLimit, l.Segments, maxSegments)
	}
	if l.Period < time.Microsecond || l.Period%time.Microsecond != 0 {
		return fmt.Errorf("%w: period %v must be a positive whole number of microseconds", ErrInvalidLimit, l.Period)
	}
	*p = params{rate: l.Rate, burst: l.BurstOrRate(), period: int64(l.Period / time.Microsecond), segments: 1, tick: 1}
	if l.Segments > 0 {
		p.segments = int64(l.Segments)
	}
	big := max(p.rate, p.burst) + 1 // +1: the leaky bucket admits burst+1 at an instant
	if hi, lo := bits.Mul64(uint64(big), uint64(p.period)); hi == 0 && (lo <= 1<<50 || lo <= maxExact && p.rate >= 4) && p.segments == 1 {
		return nil // the common case, without a division (its horizon as in paramsTo)
	}
	if m := MaxRate(l.Period); max(p.rate, p.burst) > m {
		if l.Burst > l.Rate {
			return fmt.Errorf("%w: burst %d is too large (at most %d with a period of %v)", ErrInvalidLimit, l.Burst, m, l.Period)
		}
		return fmt.Errorf("%w: rate %d per %v is too large (at most %d per %v)", ErrInvalidLimit, l.Rate, l.Period, m, l.Period)
	}
	for big > maxExact/p.period {
		if p.period%10 != 0 {
			return fmt.Errorf("%w: %d per %v is too large to count exactly (burst × period must stay under 2^53 µs)", ErrInvalidLimit, big-1, l.Period)
		}
		p.period /= 10
		p.tick *= 10
	}
	if p.period < 1000 && p.tick > 1 {
		return fmt.Errorf("%w: %d per %v is too large to count exactly: it would need ticks of %v, over a thousandth of the period", ErrInvalidLimit, big-1, l.Period, time.Duration(p.tick)*time.Microsecond)
	}
	if p.period%p.segments != 0 {
		return fmt.Errorf("%w: period %v does not split into %d equal sub-windows of whole microseconds", ErrInvalidLimit, l.Period, p.segments)
	}
	if !p.withinHorizon(2 * int64(l.Period/time.Microsecond)) {
		h := p.horizon()
		const bound = "more than the 2^52 µs (about 142 years) every time Sluice keeps must stay within"
		days := func(ticks int64) int64 { return ceilDiv(ticks, int64(24*time.Hour/time.Microsecond)/p.tick) }
		if l.Burst > l.Rate && 2*p.period <= MaxHorizon/p.tick {
			return fmt.Errorf("%w: burst %d is too large for %s: a decision could reach %d days ahead (twice (burst+1) × period / rate), %s", ErrInvalidLimit, l.Burst, l.String(), days(h), bound)
		}
		return fmt.Errorf("%w: %s is too long: a decision could reach %d days ahead (twice the period, and twice (burst+1) × period / rate), %s", ErrInvalidLimit, l.String(), days(h), bound)
	}
	return nil
}

// MinTime and MaxTime bound the instants a decision may be taken at
// (Request.Now, the now of Algorithm.Take): from the Unix epoch to 2^52 µs
// after it, 2112-09-17. Before the epoch the zero State is not at rest
// (GCRA's arrival time and the windows' numbers start at 0), and past
// MaxTime an instant an algorithm computes (now plus at most MaxHorizon)
// would leave the 2^53 µs that a double, and so the Redis store's Lua,
// holds exactly. Stores refuse other times, such as the zero time.Time,
// with ErrInvalidTime.
var (
	MinTime = time.Unix(0, 0).UTC()
	MaxTime = time.UnixMicro(maxNow).UTC()
)

// maxNow is MaxTime in microseconds since the epoch.
const maxNow = 1 << 52

// CheckTime, for store authors, returns an error wrapping ErrInvalidTime
// when t is outside MinTime … MaxTime: a store that runs the algorithms
// elsewhere (the Redis store's Lua) checks Request.Now with it before
// counting anything, as Take and TakeMicro do.
func CheckTime(t time.Time) error {
	if t.Before(MinTime) || t.After(MaxTime) {
		return timeError(t)
	}
	return nil
}

func timeError(t time.Time) error {
	hint := ""
	if t.IsZero() {
		hint = " (the zero time.Time: was Now set?)"
	}
	return fmt.Errorf("%w: %v%s is outside %v … %v", ErrInvalidTime, t, hint, MinTime.Format(time.DateOnly), MaxTime.Format(time.DateOnly))
}

// MaxHorizon bounds, in microseconds, how far ahead of now any decision
// of a valid Limit reaches: 2^52 µs, about 142.7 years (see Limit). With
// now within MinTime and MaxTime, every instant an algorithm keeps stays
// within 2^53 µs of the epoch (exact in a double, as Lua needs), and every
// RetryAfter, ResetAfter and Delay fits a time.Duration.
const MaxHorizon = 1 << 52

// withinHorizon reports whether p's horizon is at most MaxHorizon µs;
// twoPeriods is twice the period in µs. A multiplication decides most
// limits: ceil(x / rate) × tick ≤ 2^52 when (x + rate) × tick ≤ 2^52 ×
// rate; the division is left for the few near the bound.
func (p *params) withinHorizon(twoPeriods int64) bool {
	if twoPeriods > MaxHorizon {
		return false
	}
	full := (p.burst + 1) * p.period
	hi, lo := bits.Mul64(uint64(max(1<<50, full)+full+p.rate), uint64(p.tick))
	if rhi, rlo := uint64(p.rate)>>12, uint64(p.rate)<<52; hi < rhi || hi == rhi && lo <= rlo {
		return true
	}
	return p.horizon() <= MaxHorizon/p.tick
}

// horizon returns, in ticks, how far past now a decision under p can
// reach, forced charges included: twice the period (a sliding window
// counter's state lasts up to Segments+1 sub-windows past now; its waits
// are shorter), and for the buckets the debt's cap plus a full queue
// drained at the rate (the leaky bucket's rest after a forced charge; the
// other buckets' waits are shorter). (burst+1) × period ≤ 2^53 here, so
// the sum cannot overflow.
func (p *params) horizon() int64 {
	full := (p.burst + 1) * p.period
	return max(2*p.period, ceilDiv(max(1<<50, full)+full, p.rate))
}

// ticks converts a time in Unix microseconds to ticks, rounding down.
func (p *params) ticks(us int64) int64 {
	if p.tick == 1 {
		return us
	}
	return floorDiv(us, p.tick)
}

// dur converts ticks to a Duration.
func (p *params) dur(ticks int64) time.Duration {
	if ticks < 0 {
		return Never
	}
	return time.Duration(ticks*p.tick) * time.Microsecond
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func ceilDiv(a, b int64) int64 { return -floorDiv(-a, b) }

// Ticks, for store authors, is a Limit as the algorithms count it: whole ticks of Tick
// microseconds. Stores that run the algorithms elsewhere (the Redis store's
// Lua scripts) pass these numbers on and convert times with them.
type Ticks struct {
	Rate, Burst int64 // Burst already defaulted to Rate
	Period      int64 // Period in ticks
	Segments    int64 // at least 1
	Tick        int64 // microseconds per tick: 1, 10, 100, …
}

// Ticks returns l in ticks, or the error Validate would.
func (l Limit) Ticks() (Ticks, error) {
	var p params
	err := l.paramsTo(&p)
	return Ticks{Rate: p.rate, Burst: p.burst, Period: p.period, Segments: p.segments, Tick: p.tick}, err
}
