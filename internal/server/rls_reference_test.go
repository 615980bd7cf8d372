package server_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/memstore"
)

// More corners of the reference service's semantics, each as it answers.

// TestDurationUntilResetWholeSeconds: the reference service answers
// duration_until_reset in whole seconds (the time to the end of the
// epoch-aligned window, counted from the current second), and Envoy reads
// only its seconds (its X-RateLimit-Reset header). Half a second into a
// second, 29.5 s before the minute's end, the answer is 30 s: a fraction
// would reach the client as 29, sending it back while the window still
// refuses it (and as 0 in the window's last second).
func TestDurationUntilResetWholeSeconds(t *testing.T) {
	conf := `domain: p
descriptors:
  - key: m
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: w
    rate_limit: {unit: week, requests_per_unit: 1}
  - key: mo
    rate_limit: {unit: month, requests_per_unit: 1}
  - key: y
    rate_limit: {unit: year, requests_per_unit: 1}
  - key: tb
    algorithm: token_bucket
    rate_limit: {unit: second, requests_per_unit: 4}
`
	for _, tc := range []struct {
		name string
		at   time.Time
		kv   []string
		want time.Duration
	}{
		{"minute, half a second in", tMid.Add(500 * time.Millisecond), []string{"m", "a"}, 30 * time.Second},
		{"minute, in its last second", tMid.Add(29*time.Second + 999*time.Millisecond), []string{"m", "b"}, time.Second},
		{"minute, on the second", tMid, []string{"m", "c"}, 30 * time.Second},
		// tMid is Monday 2026-03-02 10:00:30 UTC. Weeks since the epoch
		// start on Thursdays (1970-01-01 was one): this one ends Thursday
		// 2026-03-05 00:00 UTC.
		{"week", tMid.Add(250 * time.Millisecond), []string{"w", "a"}, 2*24*time.Hour + 13*time.Hour + 59*time.Minute + 30*time.Second},
		// 30-day months since the epoch: day 20514 (2026-03-02) is day 24
		// of the month that began on day 20490 and ends on day 20520
		// (2026-03-08 00:00 UTC).
		{"month", tMid, []string{"mo", "a"}, 5*24*time.Hour + 13*time.Hour + 59*time.Minute + 30*time.Second},
		// 365-day years since the epoch: the 57th begins on day 20440
		// (2025-12-19) and ends on day 20805 (2026-12-19 00:00 UTC).
		{"year", tMid, []string{"y", "a"}, 290*24*time.Hour + 13*time.Hour + 59*time.Minute + 30*time.Second},
		// A token bucket of 4/s is full again 250 ms after a hit: 1 s.
		{"token bucket", tMid.Add(100 * time.Millisecond), []string{"tb", "a"}, time.Second},
	} {
		at := tc.at
		e := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, conf), envOpts{now: func() time.Time { return at }})
		r := e.call(t, "p", 0, desc(tc.kv...))
		d := r.Statuses[0].DurationUntilReset
		if d.GetNanos() != 0 || d.AsDuration() != tc.want {
			t.Errorf("%s: duration_until_reset = %v (%d s %d ns), want %v in whole seconds", tc.name, d.AsDuration(), d.GetSeconds(), d.GetNanos(), tc.want)
		}
	}
}
