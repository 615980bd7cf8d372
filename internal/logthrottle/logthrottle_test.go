package logthrottle

import (
	"sync"
	"testing"
	"time"
)

// One event per second gets through, however many goroutines ask, and the
// others are counted once each.
func TestThrottle(t *testing.T) {
	var th Throttle
	t0 := time.Unix(1_700_000_000, 0)
	var wg sync.WaitGroup
	var mu sync.Mutex
	passed := 0
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if th.OK(t0.Add(300 * time.Millisecond)) {
					mu.Lock()
					passed++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if passed != 1 {
		t.Fatalf("%d events let through in one second, want 1", passed)
	}
	if got := th.Dropped(); got != 799 {
		t.Fatalf("Dropped() = %d, want 799", got)
	}
	if got := th.Dropped(); got != 0 {
		t.Fatalf("Dropped() again = %d, want 0", got)
	}
	if !th.OK(t0.Add(time.Second)) || th.OK(t0.Add(1500*time.Millisecond)) {
		t.Fatal("the next second: want the first event through and the second not")
	}
}
