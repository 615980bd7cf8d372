package hotkeys

import (
	"slices"
	"strconv"
	"testing"
)

// A flood of keys each seen once must not make any of them hot: a key that
// takes a full stripe's smallest entry inherits its count (Space-Saving),
// so its Rate is that count however rarely it was seen, and only Rate less
// Error is sure. shards: auto used to shard such a key (and have the
// fleet shard it) whenever the stream of distinct keys was fast enough:
// on 2 cores about 150,000 decisions/s made keys seen once read 500/s.
func TestOneOffKeysNeverHot(t *testing.T) {
	s := New(Options{Capacity: 8, Stripes: 2, Sample: 1})
	for i := range 10_000 {
		if i%4 == 0 {
			s.Observe("heavy", 1, t0) // 2,500 times
		}
		s.Observe("once-"+strconv.Itoa(i), 1, t0)
	}
	top, _ := s.Top(10, t0)
	// Hot at 100 observations' worth of rate: a key seen once is far
	// below, the heavy key far above.
	h := Hot{On: 100 / s.tau, Off: 50 / s.tau}
	if got := h.Update(top); !slices.Equal(got, []string{"heavy"}) {
		t.Errorf("hot after a flood of keys seen once = %v, want [heavy]; top: %+v", got, top)
	}
}
