package bench

import (
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/internal/benchutil"
)

// BenchmarkHotKey: one key, every request admitted.
func BenchmarkHotKey(b *testing.B) {
	for _, c := range contenders() {
		b.Run(c.name, func(b *testing.B) {
			tk, done := c.make(b, hotFor(c))
			defer done()
			b.ReportAllocs()
			var admitted, n int64
			i := 0
			c0 := benchutil.CPUTime()
			for b.Loop() {
				if tk("hot", at(i)) {
					admitted++
				}
				i++
				n++
			}
			report(b, admitted, n)
			benchutil.ReportCPUSince(b, c0, n)
		})
	}
}

// BenchmarkHotKeyParallel: one key from every goroutine at once.
func BenchmarkHotKeyParallel(b *testing.B) {
	for _, c := range contenders() {
		b.Run(c.name, func(b *testing.B) {
			tk, done := c.make(b, hotFor(c))
			defer done()
			b.ReportAllocs()
			// One clock for all goroutines, as on a real hot key: with a
			// clock each, one goroutine's requests would arrive in the
			// others' past and be denied.
			var clock, admitted, n atomic.Int64
			c0 := benchutil.CPUTime()
			b.RunParallel(func(pb *testing.PB) {
				var a, k int64
				for pb.Next() {
					if tk("hot", at(int(clock.Add(1)))) {
						a++
					}
					k++
				}
				admitted.Add(a)
				n.Add(k)
			})
			report(b, admitted.Load(), n.Load())
			benchutil.ReportCPUSince(b, c0, n.Load())
		})
	}
}

// BenchmarkHotKeyDeny: one exhausted key, every request denied.
func BenchmarkHotKeyDeny(b *testing.B) {
	for _, c := range contenders() {
		b.Run(c.name, func(b *testing.B) {
			tk, done := c.make(b, denySpec)
			defer done()
			for range 3 {
				tk("hot", benchBase)
			}
			b.ReportAllocs()
			var admitted, n int64
			i := 1
			c0 := benchutil.CPUTime()
			for b.Loop() {
				if tk("hot", at(i)) {
					admitted++
				}
				i++
				n++
			}
			report(b, admitted, n)
			benchutil.ReportCPUSince(b, c0, n)
		})
	}
}
