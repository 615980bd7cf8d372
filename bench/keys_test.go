package bench

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/benchutil"
)

// fill makes a limiter for keysSpec and takes one request for every key.
func fill(b *testing.B, c contender) (take, func()) {
	b.Helper()
	tk, done := c.make(b, keysSpec)
	for i, k := range benchutil.Keys() {
		if !tk(k, at(i)) {
			b.Fatalf("%s: fill: %s denied", c.name, k)
		}
	}
	return tk, done
}

// BenchmarkKeys1M: 1,000,000 keys held by the limiter (filled before the
// timer starts); each operation takes from the next key in turn.
func BenchmarkKeys1M(b *testing.B) {
	keys := benchutil.Keys()
	for _, c := range contenders() {
		if !c.keyed {
			continue
		}
		b.Run(c.name, func(b *testing.B) {
			tk, done := fill(b, c)
			defer done()
			b.ReportAllocs()
			var admitted, n int64
			i := benchutil.NumKeys
			c0 := benchutil.CPUTime()
			for b.Loop() {
				if tk(keys[i%benchutil.NumKeys], at(i)) {
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

// BenchmarkKeys1MParallel is BenchmarkKeys1M from every goroutine at once;
// each walks the key space from its own starting point with its own clock.
func BenchmarkKeys1MParallel(b *testing.B) {
	keys := benchutil.Keys()
	for _, c := range contenders() {
		if !c.keyed {
			continue
		}
		// RunParallel calls the function again as b.N grows: fill once.
		var tk take
		done := func() {}
		b.Run(c.name, func(b *testing.B) {
			if tk == nil {
				tk, done = fill(b, c)
			}
			b.ReportAllocs()
			b.ResetTimer()
			var g, admitted, n atomic.Int64
			c0 := benchutil.CPUTime()
			b.RunParallel(func(pb *testing.PB) {
				i := benchutil.NumKeys + int(g.Add(1))*(benchutil.NumKeys/16+7)
				var a, k int64
				for pb.Next() {
					if tk(keys[i%benchutil.NumKeys], at(i)) {
						a++
					}
					i++
					k++
				}
				admitted.Add(a)
				n.Add(k)
			})
			report(b, admitted.Load(), n.Load())
			benchutil.ReportCPUSince(b, c0, n.Load())
		})
		done()
	}
}

// BenchmarkMemory1M fills a limiter with 1,000,000 keys, one request each,
// and reports the heap it holds per key. Run with -benchtime=1x: one
// operation is one whole fill.
//
//	B/key      heap growth per key; the caller's key strings were made
//	           before the first reading (a limiter that keeps its own copy
//	           of each key still pays for it here)
//	B/key+str  the same with one fresh key string per request, made during
//	           the fill as a server would: all the memory the keys cost
//	ns/key     fill time per key (first request of a new key)
func BenchmarkMemory1M(b *testing.B) {
	keys := benchutil.Keys()
	for _, c := range contenders() {
		if !c.keyed {
			continue
		}
		b.Run(c.name, func(b *testing.B) {
			var perKey, perKeyStr, nsKey float64
			for range b.N {
				before := benchutil.HeapAlloc()
				start := time.Now()
				tk, done := fill(b, c)
				nsKey = float64(time.Since(start).Nanoseconds()) / benchutil.NumKeys
				perKey = float64(int64(benchutil.HeapAlloc())-int64(before)) / benchutil.NumKeys
				runtime.KeepAlive(tk)
				done()
				tk = nil

				before = benchutil.HeapAlloc()
				tk, done = c.make(b, keysSpec)
				for i := range benchutil.NumKeys {
					if !tk(benchutil.Key(i), at(i)) {
						b.Fatalf("%s: fill: key %d denied", c.name, i)
					}
				}
				perKeyStr = float64(int64(benchutil.HeapAlloc())-int64(before)) / benchutil.NumKeys
				runtime.KeepAlive(tk)
				done()
			}
			runtime.KeepAlive(keys)
			b.ReportMetric(perKey, "B/key")
			b.ReportMetric(perKeyStr, "B/key+str")
			b.ReportMetric(nsKey, "ns/key")
		})
	}
}
