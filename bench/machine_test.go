package bench

import (
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/internal/benchutil"
)

// spin is pure CPU work with no memory traffic and nothing shared.
func spin(x int64) int64 {
	for i := range int64(1000) {
		x = x*31 + i
	}
	return x
}

var spinSink atomic.Int64

// BenchmarkCalibrate measures the machine rather than a limiter: pure
// arithmetic, serial and from every goroutine. Calibrate ÷
// CalibrateParallel is the most any parallel benchmark here can gain; on 2
// free cores it is 2×.
func BenchmarkCalibrate(b *testing.B) {
	b.Run("spin", func(b *testing.B) {
		x := int64(1)
		c0 := benchutil.CPUTime()
		n := int64(0)
		for b.Loop() {
			x = spin(x)
			n++
		}
		benchutil.ReportCPUSince(b, c0, n)
		spinSink.Add(x)
	})
}

// BenchmarkCalibrateParallel is BenchmarkCalibrate from every goroutine.
func BenchmarkCalibrateParallel(b *testing.B) {
	b.Run("spin", func(b *testing.B) {
		var ops atomic.Int64
		c0 := benchutil.CPUTime()
		b.RunParallel(func(pb *testing.PB) {
			x, n := int64(1), int64(0)
			for pb.Next() {
				x = spin(x)
				n++
			}
			spinSink.Add(x)
			ops.Add(n)
		})
		benchutil.ReportCPUSince(b, c0, ops.Load())
	})
}
