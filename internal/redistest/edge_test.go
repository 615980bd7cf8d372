package redistest

import (
	"testing"
	"time"
)

func TestClearOfEdge(t *testing.T) {
	day := 24 * time.Hour
	midnight := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		at    time.Time
		slept time.Duration
	}{
		{"far from the edge", midnight.Add(-3 * time.Minute), 0},
		{"just clear", midnight.Add(-2*time.Minute - time.Nanosecond), 0},
		{"within need", midnight.Add(-90 * time.Second), 90*time.Second + time.Millisecond},
		{"at the edge's last instant", midnight.Add(-time.Nanosecond), time.Nanosecond + time.Millisecond},
		{"on the edge (the next window's first instant)", midnight, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := tc.at
			var sleeps []time.Duration
			got := clearOfEdge(func() time.Time { return clock }, func(d time.Duration) { sleeps = append(sleeps, d); clock = clock.Add(d) }, day, 2*time.Minute)
			if got != tc.slept {
				t.Errorf("slept %v (%v), want %v", got, sleeps, tc.slept)
			}
			if left := day - time.Duration(clock.UnixNano()%int64(day)); left <= 2*time.Minute {
				t.Errorf("returned %v before the edge, want more than 2m", left)
			}
		})
	}
}
