package memstore_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/benchutil"
	"github.com/sluicehq/sluice/memstore"
)

// The benchmarks drive memstore through sluice.Limiter.AllowAt with explicit
// instants that advance by 1µs per operation, so results do not depend on
// the wall clock. The peer comparison (x/time/rate, ulule, sethvargo,
// httprate) lives in the separate bench/ module; see docs/bench-core.md.

// benchBase is the first instant of every benchmark: the start of an hour,
// so hour-long fixed windows do not roll over while a benchmark runs.
var benchBase = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// hotLimit admits one request per µs on one key with room to spare (2 per
// µs); the sliding log then holds about 1,000 times.
var hotLimit = sluice.Every(2000, time.Millisecond)

// keysLimit admits every request of the 1M-key benchmarks (each key is hit
// about once per simulated second, far under 1000/h) and keeps every key
// away from rest for longer than one pass over the key space, so the map
// really holds 1,000,000 entries.
var keysLimit = sluice.PerHour(1000)

// denyLimit is exhausted on the first request or two and stays so.
var denyLimit = sluice.PerHour(1)

func at(i int) time.Time { return benchBase.Add(time.Duration(i) * time.Microsecond) }

func newLimiter(b *testing.B, s sluice.Store, alg sluice.Algorithm, l sluice.Limit) *sluice.Limiter {
	lim, err := sluice.NewLimiter(s, alg, l)
	if err != nil {
		b.Fatal(err)
	}
	return lim
}

// BenchmarkHotKey is one key taking one request per µs, all admitted.
func BenchmarkHotKey(b *testing.B) {
	ctx := context.Background()
	for _, alg := range sluice.Algorithms() {
		b.Run(alg.String(), func(b *testing.B) {
			lim := newLimiter(b, memstore.New(memstore.Options{}), alg, hotLimit)
			b.ReportAllocs()
			i := 0
			c0 := benchutil.CPUTime()
			for b.Loop() {
				d, err := lim.AllowAt(ctx, "hot", at(i), 1)
				if err != nil || !d.Allowed {
					b.Fatalf("AllowAt(hot, +%dµs) = %+v, %v; want allowed", i, d, err)
				}
				i++
			}
			benchutil.ReportCPUSince(b, c0, int64(i))
		})
	}
}

// BenchmarkHotKeyParallel is BenchmarkHotKey from every goroutine at once:
// all on the same key, so the same shard lock.
func BenchmarkHotKeyParallel(b *testing.B) {
	ctx := context.Background()
	for _, alg := range sluice.Algorithms() {
		b.Run(alg.String(), func(b *testing.B) {
			lim := newLimiter(b, memstore.New(memstore.Options{}), alg, hotLimit)
			b.ReportAllocs()
			// One clock for all goroutines, as on a real hot key.
			var clock atomic.Int64
			c0 := benchutil.CPUTime()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := lim.AllowAt(ctx, "hot", at(int(clock.Add(1))), 1); err != nil {
						b.Error(err)
						return
					}
				}
			})
			benchutil.ReportCPUSince(b, c0, clock.Load())
		})
	}
}

// BenchmarkHotKeyDeny is one exhausted key: every request is denied.
func BenchmarkHotKeyDeny(b *testing.B) {
	ctx := context.Background()
	for _, alg := range sluice.Algorithms() {
		b.Run(alg.String(), func(b *testing.B) {
			lim := newLimiter(b, memstore.New(memstore.Options{}), alg, denyLimit)
			for range 3 {
				if _, err := lim.AllowAt(ctx, "hot", benchBase, 1); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			i := 1
			c0 := benchutil.CPUTime()
			for b.Loop() {
				d, err := lim.AllowAt(ctx, "hot", at(i), 1)
				if err != nil || d.Allowed {
					b.Fatalf("AllowAt(hot, +%dµs) = %+v, %v; want denied", i, d, err)
				}
				i++
			}
			benchutil.ReportCPUSince(b, c0, int64(i-1))
		})
	}
}

// filled returns a store holding every key of benchKeys, each having taken
// one request at benchBase+index µs.
func filled(b *testing.B, alg sluice.Algorithm) (*memstore.Store, *sluice.Limiter) {
	b.Helper()
	ctx := context.Background()
	s := memstore.New(memstore.Options{})
	lim := newLimiter(b, s, alg, keysLimit)
	for i, k := range benchutil.Keys() {
		if _, err := lim.AllowAt(ctx, k, at(i), 1); err != nil {
			b.Fatal(err)
		}
	}
	if n := s.Len(); n != benchutil.NumKeys {
		b.Fatalf("after filling, Len() = %d, want %d", n, benchutil.NumKeys)
	}
	return s, lim
}

// BenchmarkKeys1M takes one request per operation from 1,000,000 keys in
// turn, all held by the store (filled before the timer starts).
func BenchmarkKeys1M(b *testing.B) {
	ctx := context.Background()
	keys := benchutil.Keys()
	for _, alg := range sluice.Algorithms() {
		b.Run(alg.String(), func(b *testing.B) {
			s, lim := filled(b, alg)
			b.ReportAllocs()
			i := benchutil.NumKeys
			c0 := benchutil.CPUTime()
			for b.Loop() {
				d, err := lim.AllowAt(ctx, keys[i%benchutil.NumKeys], at(i), 1)
				if err != nil || !d.Allowed {
					b.Fatalf("AllowAt(%s, +%dµs) = %+v, %v; want allowed", keys[i%benchutil.NumKeys], i, d, err)
				}
				i++
			}
			b.StopTimer()
			benchutil.ReportCPUSince(b, c0, int64(i-benchutil.NumKeys))
			if n := s.Len(); n < benchutil.NumKeys {
				b.Fatalf("after the run, Len() = %d, want ≥ %d", n, benchutil.NumKeys)
			}
		})
	}
}

// BenchmarkKeys1MParallel is BenchmarkKeys1M from every goroutine at once;
// each goroutine walks the key space from its own starting point with its
// own clock.
func BenchmarkKeys1MParallel(b *testing.B) {
	ctx := context.Background()
	keys := benchutil.Keys()
	for _, alg := range sluice.Algorithms() {
		// RunParallel calls the function again as b.N grows: fill once.
		var s *memstore.Store
		var lim *sluice.Limiter
		b.Run(alg.String(), func(b *testing.B) {
			if s == nil {
				s, lim = filled(b, alg)
			}
			var g, ops atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			c0 := benchutil.CPUTime()
			b.RunParallel(func(pb *testing.PB) {
				i := benchutil.NumKeys + int(g.Add(1))*(benchutil.NumKeys/16+7)
				n := int64(0)
				for pb.Next() {
					if _, err := lim.AllowAt(ctx, keys[i%benchutil.NumKeys], at(i), 1); err != nil {
						b.Error(err)
						return
					}
					i++
					n++
				}
				ops.Add(n)
			})
			b.StopTimer()
			benchutil.ReportCPUSince(b, c0, ops.Load())
			if n := s.Len(); n < benchutil.NumKeys {
				b.Fatalf("after the run, Len() = %d, want ≥ %d", n, benchutil.NumKeys)
			}
		})
		s, lim = nil, nil
	}
}

// TestManyKeysSurviveSweeps checks the store's table under the churn the
// benchmarks create: in one shard (long probe runs), 50,000 keys of which
// every other one rests after 1 s and the rest after 1 h; after a sweep at
// 2 s exactly the long-lived half remains, each with its own count.
func TestManyKeysSurviveSweeps(t *testing.T) {
	ctx := context.Background()
	s := memstore.New(memstore.Options{Shards: 1})
	short, long := sluice.PerSecond(10), sluice.PerHour(10)
	const n = 50_000
	limitOf := func(i int) sluice.Limit {
		if i%2 == 0 {
			return short
		}
		return long
	}
	for i := range n {
		r := sluice.Request{Key: benchutil.Key(i), Algorithm: sluice.FixedWindow, Limit: limitOf(i), Cost: int64(1 + i%3), Now: benchBase}
		if _, err := s.Take(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Len(); got != n {
		t.Fatalf("Len() after %d keys = %d", n, got)
	}
	later := benchBase.Add(2 * time.Second)
	if got := s.Sweep(later); got != n/2 {
		t.Errorf("Sweep(+2s) deleted %d keys, want %d", got, n/2)
	}
	if got := s.Len(); got != n/2 {
		t.Errorf("Len() after Sweep(+2s) = %d, want %d", got, n/2)
	}
	for i := 1; i < n; i += 2 {
		// A query (cost 0) reads the count without changing it.
		r := sluice.Request{Key: benchutil.Key(i), Algorithm: sluice.FixedWindow, Limit: long, Cost: 0, Now: later}
		d, err := s.Take(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(10 - (1 + i%3)); d.Remaining != want {
			t.Fatalf("Take(%s, cost 0, +2s).Remaining = %d, want %d (its count was lost)", benchutil.Key(i), d.Remaining, want)
		}
	}
}

// BenchmarkMemory1M fills a store with 1,000,000 keys, one request each,
// and reports the heap it holds per key. Run it with -benchtime=1x: one
// operation is one whole fill.
//
//	B/key        heap growth per key, the caller's key strings allocated
//	             before the first reading (memstore still counts: it keeps
//	             its own copy of each key)
//	B/key+str    the same with the key strings made during the fill, one
//	             fresh string per request as a server would have: all the
//	             memory the key space costs
//	ns/key       fill time per key
func BenchmarkMemory1M(b *testing.B) {
	ctx := context.Background()
	keys := benchutil.Keys()
	for _, alg := range sluice.Algorithms() {
		b.Run(alg.String(), func(b *testing.B) {
			var perKey, perKeyStr, nsKey float64
			for range b.N {
				before := benchutil.HeapAlloc()
				start := time.Now()
				s, _ := filled(b, alg)
				nsKey = float64(time.Since(start).Nanoseconds()) / benchutil.NumKeys
				after := benchutil.HeapAlloc()
				runtime.KeepAlive(s)
				perKey = float64(int64(after)-int64(before)) / benchutil.NumKeys
				s = nil

				before = benchutil.HeapAlloc()
				s = memstore.New(memstore.Options{})
				lim := newLimiter(b, s, alg, keysLimit)
				for i := range benchutil.NumKeys {
					if _, err := lim.AllowAt(ctx, benchutil.Key(i), at(i), 1); err != nil {
						b.Fatal(err)
					}
				}
				after = benchutil.HeapAlloc()
				if n := s.Len(); n != benchutil.NumKeys {
					b.Fatalf("Len() = %d, want %d", n, benchutil.NumKeys)
				}
				runtime.KeepAlive(s)
				perKeyStr = float64(int64(after)-int64(before)) / benchutil.NumKeys
			}
			runtime.KeepAlive(keys)
			b.ReportMetric(perKey, "B/key")
			b.ReportMetric(perKeyStr, "B/key+str")
			b.ReportMetric(nsKey, "ns/key")
		})
	}
}

// BenchmarkNamespace is the hot key through Store.Take with and without a
// namespace, the rest of the request alike: what namespacing a Limiter's
// keys costs a decision, in one binary.
func BenchmarkNamespace(b *testing.B) {
	ctx := context.Background()
	for _, alg := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA, sluice.FixedWindow} {
		lim := newLimiter(b, memstore.New(memstore.Options{}), alg, hotLimit)
		for _, ns := range []struct{ name, ns string }{{"none", ""}, {"limiter", lim.Namespace()}} {
			b.Run(alg.String()+"/"+ns.name, func(b *testing.B) {
				s := memstore.New(memstore.Options{})
				b.ReportAllocs()
				i := 0
				c0 := benchutil.CPUTime()
				for b.Loop() {
					d, err := s.Take(ctx, sluice.Request{Namespace: ns.ns, Key: "hot", Algorithm: alg, Limit: hotLimit, Cost: 1, Now: at(i)})
					if err != nil || !d.Allowed {
						b.Fatalf("Take = %+v, %v", d, err)
					}
					i++
				}
				benchutil.ReportCPUSince(b, c0, int64(i))
			})
		}
	}
}
