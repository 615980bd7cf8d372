package hotkeys

import (
	"encoding/json"
	"math"
	"testing"
	"time"
)

// A wall clock stepped back (NTP, a restored VM) does not run a summary's
// time backwards: its rates read as at the latest observation, and what is
// observed meanwhile still counts. Top used to scale the counts by the
// time gone back: a minute back read every rate 64 times higher (keys at
// 8/s past shards: auto's 500/s), and a few hours back read +Inf, which
// GET /v1/hotkeys could not encode.
func TestClockSteppedBack(t *testing.T) {
	s := New(Options{Capacity: 8, Stripes: 2, Sample: 1})
	for i := range 100 {
		s.Observe("a", 1, t0.Add(time.Duration(i)*100*time.Millisecond))
	}
	last := t0.Add(99 * 100 * time.Millisecond) // the latest observation
	top, _ := s.Top(1, last)
	want := top[0].Rate
	for _, back := range []time.Duration{time.Minute, 3 * time.Hour} {
		top, total := s.Top(1, last.Add(-back))
		if got := top[0].Rate; got > want*1.0001 || math.IsInf(total, 0) || math.IsNaN(total) {
			t.Errorf("Top %v before the latest observation: rate %g (total %g), want at most %g", back, got, total, want)
		}
	}
	// Observed after the step back, "b" counts as "a" did.
	back := last.Add(-3 * time.Hour)
	for i := range 100 {
		s.Observe("b", 1, back.Add(time.Duration(i)*100*time.Millisecond))
	}
	top, _ = s.Top(2, back.Add(10*time.Second))
	if len(top) != 2 || top[1].Rate < want/2 {
		t.Errorf("after the step back, 100 observations of b: %+v; want b near a (%g)", top, want)
	}
	if _, err := json.Marshal(top); err != nil {
		t.Errorf("the figures after the step back cannot be encoded: %v", err)
	}
	if top, _ := s.Top(2, last.Add(-6*time.Hour)); len(top) > 0 {
		if _, err := json.Marshal(top); err != nil {
			t.Errorf("Top 6h before the latest observation cannot be encoded (GET /v1/hotkeys): %v", err)
		}
	}
}
