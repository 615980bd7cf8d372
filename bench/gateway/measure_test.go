package main

import (
	"testing"
	"time"
)

// A latency step keeps, of its runs, one at the asked rate before one
// short of it, then the lowest p99.
func TestLowerTail(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		name    string
		r, best result
		want    bool
	}{
		{"first run", result{requests: 10, p99: 9 * ms}, result{}, true},
		{"first run, short", result{requests: 10, p99: 9 * ms, short: true}, result{}, true},
		{"lower p99", result{requests: 10, p99: 1 * ms}, result{requests: 10, p99: 2 * ms}, true},
		{"higher p99", result{requests: 10, p99: 3 * ms}, result{requests: 10, p99: 2 * ms}, false},
		{"equal p99: the first stays", result{requests: 10, p99: 2 * ms}, result{requests: 10, p99: 2 * ms}, false},
		{"at the rate beats a short run with a lower p99", result{requests: 10, p99: 5 * ms}, result{requests: 9, p99: 1 * ms, short: true}, true},
		{"a short run never beats one at the rate", result{requests: 9, p99: 1 * ms, short: true}, result{requests: 10, p99: 5 * ms}, false},
		{"both short: lower p99", result{requests: 9, p99: 1 * ms, short: true}, result{requests: 9, p99: 5 * ms, short: true}, true},
	} {
		if got := lowerTail(c.r, c.best); got != c.want {
			t.Errorf("%s: lowerTail = %v, want %v", c.name, got, c.want)
		}
	}
}
