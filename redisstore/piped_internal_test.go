package redisstore

import (
	"testing"
	"time"
)

// A pipeline gets the timeout for every 64 calls: a thousand calls under
// one 50 ms bound all failed on a Redis that answers each in time.
func TestPipelineTimeout(t *testing.T) {
	s := &Store{opts: Options{Timeout: 50 * time.Millisecond}}
	for _, c := range []struct {
		calls int
		want  time.Duration
	}{{1, 50 * time.Millisecond}, {64, 50 * time.Millisecond}, {65, 100 * time.Millisecond}, {1000, 800 * time.Millisecond}} {
		if got := s.pipelineTimeout(c.calls); got != c.want {
			t.Errorf("%d calls: bound %v, want %v", c.calls, got, c.want)
		}
	}
}
