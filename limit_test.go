package sluice_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func TestParseLimit(t *testing.T) {
	tests := []struct {
		in   string
		want sluice.Limit
	}{
		{"100/s", sluice.PerSecond(100)},
		{"5/m", sluice.PerMinute(5)},
		{"1000/h", sluice.PerHour(1000)},
		{"10000/d", sluice.PerDay(10000)},
		{" 3 / 250ms ", sluice.Every(3, 250*time.Millisecond)},
		{"7/1m30s", sluice.Every(7, 90*time.Second)},
		{"1/7d", sluice.Every(1, 7*24*time.Hour)},
	}
	for _, tt := range tests {
		got, err := sluice.ParseLimit(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseLimit(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "10", "10/", "/s", "0/s", "-1/s", "x/s", "10/y", "10/-1s", "10/0s", "10/1ns", "10/0d", "1.5/s", "99999999999999999999/s"} {
		if _, err := sluice.ParseLimit(bad); !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("ParseLimit(%q) error = %v, want ErrInvalidLimit", bad, err)
		}
	}
}

func TestLimitStringRoundTrip(t *testing.T) {
	for _, l := range []sluice.Limit{sluice.PerSecond(1), sluice.PerMinute(5), sluice.PerHour(7), sluice.PerDay(9), sluice.Every(3, 250*time.Millisecond), sluice.Every(2, 48*time.Hour)} {
		got, err := sluice.ParseLimit(l.String())
		if err != nil || got != l {
			t.Errorf("ParseLimit(%q) = %+v, %v; want %+v", l.String(), got, err, l)
		}
	}
}

func TestLimitTicks(t *testing.T) {
	tests := []struct {
		l    sluice.Limit
		tick int64
	}{
		{sluice.PerSecond(1000), 1},
		{sluice.PerDay(100_000), 1},
		{sluice.PerDay(1_000_000), 10}, // 1e6 × 8.64e10 µs > 2^53
		{sluice.PerDay(1_000_000_000), 10_000},
	}
	for _, tt := range tests {
		got, err := tt.l.Ticks()
		if err != nil || got.Tick != tt.tick || got.Period*got.Tick != tt.l.Period.Microseconds() {
			t.Errorf("%v.Ticks() = %+v, %v; want tick %d", tt.l, got, err, tt.tick)
		}
	}
	for _, bad := range []sluice.Limit{
		{Rate: 1 << 60, Period: 3 * time.Microsecond},              // cannot fit even with coarse ticks
		{Rate: 1, Period: time.Second, Segments: 3},                // 333333.3 µs sub-windows
		{Rate: 1, Period: time.Second, Burst: -1},                  // negative burst
		{Rate: 1, Period: 1500 * time.Nanosecond},                  // not whole µs
		{Rate: 1, Period: time.Second, Segments: 2000},             // too many segments
		{Rate: 0, Period: time.Second},                             // no rate
		{Rate: 1, Period: -time.Second},                            // negative period
		{Rate: 1, Period: 0},                                       // zero period
		{Rate: 1 << 40, Period: 24 * time.Hour, Burst: 1},          // rate too large for a day
		{Rate: 1, Period: 24 * time.Hour * 365 * 100, Burst: 1e12}, // a century, bursts of 1e12
	} {
		if err := bad.Validate(); !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("%+v.Validate() = %v, want ErrInvalidLimit", bad, err)
		}
	}
}

func FuzzParseLimit(f *testing.F) {
	for _, s := range []string{"100/s", "5/m", "1/h", "9/d", "3/250ms", "2/7d", "1/1m30s", "0/s", "x", "1/", "10/0.5s", "1/-1d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := sluice.ParseLimit(s)
		if err != nil {
			if !errors.Is(err, sluice.ErrInvalidLimit) {
				t.Fatalf("ParseLimit(%q): error %v does not wrap ErrInvalidLimit", s, err)
			}
			return
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("ParseLimit(%q) = %+v, which does not validate: %v", s, l, err)
		}
		back, err := sluice.ParseLimit(l.String())
		if err != nil || back != l {
			t.Fatalf("ParseLimit(%q) = %+v; its String %q parses to %+v, %v", s, l, l.String(), back, err)
		}
	})
}

func TestParseAlgorithm(t *testing.T) {
	for _, a := range sluice.Algorithms() {
		got, err := sluice.ParseAlgorithm(a.String())
		if err != nil || got != a {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", a.String(), got, err)
		}
	}
	if _, err := sluice.ParseAlgorithm("token-bucket"); !errors.Is(err, sluice.ErrUnknownAlgorithm) {
		t.Errorf("ParseAlgorithm(token-bucket) error = %v, want ErrUnknownAlgorithm", err)
	}
}

// TestTooLargeSaysTheMaximum: a rate, burst or unit too large to count is
// refused naming the largest that works, and that largest one is valid.
func TestTooLargeSaysTheMaximum(t *testing.T) {
	for _, p := range []time.Duration{time.Microsecond, 999 * time.Microsecond, time.Millisecond, time.Second, 7 * time.Second, time.Minute, 24 * time.Hour, 365 * 24 * time.Hour} {
		m := sluice.MaxRate(p)
		if err := (sluice.Limit{Rate: m, Period: p}).Validate(); err != nil {
			t.Errorf("Limit{Rate: MaxRate(%v) = %d}.Validate() = %v, want nil", p, m, err)
		}
		// A burst of MaxRate with a rate that refills it within the
		// horizon (MaxHorizon: here in about two periods); with a rate
		// of 1 it would take ages, refused by TestHorizonBound's rule.
		if err := (sluice.Limit{Rate: m/2 + 1, Burst: m, Period: p}).Validate(); err != nil {
			t.Errorf("Limit{Rate: %d, Burst: MaxRate(%v) = %d}.Validate() = %v, want nil", m/2+1, p, m, err)
		}
		want := fmt.Sprintf("too large (at most %d", m)
		for _, l := range []sluice.Limit{{Rate: m + 1, Period: p}, {Rate: 1, Burst: m + 1, Period: p}, {Rate: math.MaxInt64, Period: p}, {Rate: 1, Burst: math.MaxInt64, Period: p}} {
			if err := l.Validate(); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%+v.Validate() = %v, want an error saying %q", l, err, want)
			}
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"99999999999999999999/s", "rate 99999999999999999999 is too large (at most 9007199254739 per 1s)"},
		{"9223372036854775807/m", "too large (at most "},
		{"5/99999999999999999999s", `unit "99999999999999999999s" is too large (at most 2562047h47m16.854775807s)`},
		{"5/250000000000000000000d", `unit "250000000000000000000d" is too large (at most 106751d)`},
		{"5/106752d", `unit "106752d" is too large (at most 106751d)`},
		{"-99999999999999999999/s", "is not a whole number ≥ 1"},
	} {
		if _, err := sluice.ParseLimit(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseLimit(%q) = %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
}
