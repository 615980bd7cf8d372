package sluice

import (
	"sort"
	"testing"
)

// TestExpiredIsBinarySearch: expired, the sliding log's scan-then-search,
// finds exactly the first time after cut, for every log of up to 12 times
// (with repeats) and every cut around them.
func TestExpiredIsBinarySearch(t *testing.T) {
	for n := 0; n <= 12; n++ {
		log := make([]int64, n)
		for rep := 1; rep <= 3; rep++ { // times repeat rep at a time
			for i := range log {
				log[i] = int64(10 + 2*(i/rep))
			}
			for cut := int64(8); cut <= 36; cut++ {
				want := sort.Search(n, func(i int) bool { return log[i] > cut })
				if got := expired(log, cut); got != want {
					t.Fatalf("expired(%v, %d) = %d, want %d", log, cut, got, want)
				}
			}
		}
	}
}
