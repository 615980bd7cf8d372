package bench

import (
	"context"
	"math"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-chi/httprate"
	sethvargo "github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	ulule "github.com/ulule/limiter/v3"
	ululemem "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"
)

// Time: contenders with an explicit-time API (Sluice, x/time/rate, the
// httprate counter) get instants that advance 1µs per operation from
// benchBase; ulule and sethvargo read the wall clock themselves, so their
// limits are chosen to admit at any speed the machine can reach.

// benchBase is the start of an hour, so hour-long windows do not roll over
// during a run.
var benchBase = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(i int) time.Time { return benchBase.Add(time.Duration(i) * time.Microsecond) }

// spec is a limit: rate requests per period, bursts of rate.
type spec struct {
	rate   int64
	period time.Duration
}

var (
	// hotSpec admits one request per µs with room to spare; the sliding
	// log then holds about 1,000 times.
	hotSpec = spec{2000, time.Millisecond}
	// wallSpec is hotSpec for the wall-clock contenders: it admits at any
	// speed for an hour (a window of 2,000/ms would deny a fast loop, and
	// sethvargo's bucket refills only at whole intervals).
	wallSpec = spec{1 << 40, time.Hour}
	// keysSpec keeps each of 1M keys away from rest for longer than a pass
	// over the key space (1 s simulated) and admits all it sees.
	keysSpec = spec{1000, time.Hour}
	// denySpec is exhausted by the first request and stays so.
	denySpec = spec{1, time.Hour}
)

// take decides one request for key at now and reports whether it was
// admitted. Contenders ignore now if they read the clock themselves.
type take func(key string, now time.Time) bool

type contender struct {
	name  string
	keyed bool // false: one limiter, no key (x/time/rate's hot path)
	wall  bool // reads the wall clock: use wallSpec instead of hotSpec
	// make returns a fresh limiter for s and a function that releases it.
	make func(tb testing.TB, s spec) (take, func())
}

func contenders() []contender {
	var cs []contender
	for _, alg := range sluice.Algorithms() {
		cs = append(cs, contender{name: "sluice-" + alg.String(), keyed: true, make: sluiceMaker(alg)})
	}
	return append(cs,
		contender{name: "xtimerate", make: xtimerateSingle},
		contender{name: "xtimerate-map", keyed: true, make: xtimerateMap},
		contender{name: "xtimerate-syncmap", keyed: true, make: xtimerateSyncMap},
		contender{name: "ulule", keyed: true, wall: true, make: ululeMemory},
		contender{name: "sethvargo", keyed: true, wall: true, make: sethvargoMemory},
		contender{name: "httprate", keyed: true, make: httprateCounter},
	)
}

func sluiceMaker(alg sluice.Algorithm) func(testing.TB, spec) (take, func()) {
	return func(tb testing.TB, s spec) (take, func()) {
		ctx := context.Background()
		lim, err := sluice.NewLimiter(memstore.New(memstore.Options{}), alg, sluice.Every(s.rate, s.period))
		if err != nil {
			tb.Fatal(err)
		}
		return func(key string, now time.Time) bool {
			d, err := lim.AllowAt(ctx, key, now, 1)
			if err != nil {
				tb.Fatal(err)
			}
			return d.Allowed
		}, func() {}
	}
}

func xrateLimit(s spec) rate.Limit { return rate.Limit(float64(s.rate) / s.period.Seconds()) }

// xtimerateSingle is the single-limiter hot path: no key, no map.
func xtimerateSingle(_ testing.TB, s spec) (take, func()) {
	l := rate.NewLimiter(xrateLimit(s), int(s.rate))
	return func(_ string, now time.Time) bool { return l.AllowN(now, 1) }, func() {}
}

// xtimerateMap is the usual keyed use of x/time/rate: one *rate.Limiter per
// key in a map under a mutex (never cleaned up, as in most examples).
func xtimerateMap(_ testing.TB, s spec) (take, func()) {
	var mu sync.Mutex
	m := make(map[string]*rate.Limiter)
	r, burst := xrateLimit(s), int(s.rate)
	return func(key string, now time.Time) bool {
		mu.Lock()
		l := m[key]
		if l == nil {
			l = rate.NewLimiter(r, burst)
			m[key] = l
		}
		mu.Unlock()
		return l.AllowN(now, 1)
	}, func() {}
}

// xtimerateSyncMap is the same over a sync.Map.
func xtimerateSyncMap(_ testing.TB, s spec) (take, func()) {
	var m sync.Map
	r, burst := xrateLimit(s), int(s.rate)
	return func(key string, now time.Time) bool {
		v, ok := m.Load(key)
		if !ok {
			v, _ = m.LoadOrStore(key, rate.NewLimiter(r, burst))
		}
		return v.(*rate.Limiter).AllowN(now, 1)
	}, func() {}
}

// ululeMemory is github.com/ulule/limiter/v3's memory store through its
// Limiter.Get, as its middlewares call it (fixed window, wall clock).
func ululeMemory(tb testing.TB, s spec) (take, func()) {
	ctx := context.Background()
	l := ulule.New(ululemem.NewStore(), ulule.Rate{Period: s.period, Limit: s.rate})
	return func(key string, _ time.Time) bool {
		c, err := l.Get(ctx, key)
		if err != nil {
			tb.Fatal(err)
		}
		return !c.Reached
	}, func() {}
}

// sethvargoMemory is github.com/sethvargo/go-limiter's memorystore (token
// bucket refilled per interval tick, wall clock).
func sethvargoMemory(tb testing.TB, s spec) (take, func()) {
	ctx := context.Background()
	st, err := memorystore.New(&memorystore.Config{Tokens: uint64(s.rate), Interval: s.period})
	if err != nil {
		tb.Fatal(err)
	}
	var store sethvargo.Store = st
	return func(key string, _ time.Time) bool {
		_, _, _, ok, err := store.Take(ctx, key)
		if err != nil {
			tb.Fatal(err)
		}
		return ok
	}, func() { store.Close(ctx) }
}

// httprateCounter drives github.com/go-chi/httprate's in-memory counter
// (NewLocalLimitCounter) directly, with the sliding-window arithmetic and
// the limiter-wide mutex of httprate's RateLimiter.OnLimit, minus the HTTP
// headers. httprate's decision itself (OnLimit) needs an http.ResponseWriter
// and reads time.Now, so it cannot be driven with explicit time; its counter
// can. The counter keys by a 64-bit xxh3 hash of the key, not the key.
func httprateCounter(tb testing.TB, s spec) (take, func()) {
	window := s.period
	c := httprate.NewLocalLimitCounter(window)
	c.Config(int(s.rate), window)
	var mu sync.Mutex
	limit := float64(s.rate)
	return func(key string, now time.Time) bool {
		cur := now.Truncate(window)
		mu.Lock()
		defer mu.Unlock()
		n, prev, err := c.Get(key, cur, cur.Add(-window))
		if err != nil {
			tb.Fatal(err)
		}
		est := float64(prev)*(float64(window)-float64(now.Sub(cur)))/float64(window) + float64(n)
		if int(math.Round(est))+1 > int(limit) {
			return false
		}
		if err := c.IncrementBy(key, cur, 1); err != nil {
			tb.Fatal(err)
		}
		return true
	}, func() {}
}

func hotFor(c contender) spec {
	if c.wall {
		return wallSpec
	}
	return hotSpec
}

// report adds the share of admitted requests, so a reader sees each row
// measured what it claims (admit or deny path).
func report(b *testing.B, admitted, n int64) {
	if n > 0 {
		b.ReportMetric(float64(admitted)/float64(n), "admit/op")
	}
}

// cpuTime is the CPU time this process has used. On a shared machine the
// wall time of a benchmark includes the time other processes held the CPU;
// cpu-ns/op (CPU time ÷ operations, all goroutines included) does not, so
// it is the steadier figure when the machine is busy.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, since time.Duration, n int64) {
	if n > 0 {
		b.ReportMetric(float64(cpuTime()-since)/float64(n), "cpu-ns/op")
	}
}

// BenchmarkHotKey: one key, every request admitted.
func BenchmarkHotKey(b *testing.B) {
	for _, c := range contenders() {
		b.Run(c.name, func(b *testing.B) {
			tk, done := c.make(b, hotFor(c))
			defer done()
			b.ReportAllocs()
			var admitted, n int64
			i := 0
			c0 := cpuTime()
			for b.Loop() {
				if tk("hot", at(i)) {
					admitted++
				}
				i++
				n++
			}
			report(b, admitted, n)
			reportCPU(b, c0, n)
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
			c0 := cpuTime()
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
			reportCPU(b, c0, n.Load())
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
			c0 := cpuTime()
			for b.Loop() {
				if tk("hot", at(i)) {
					admitted++
				}
				i++
				n++
			}
			report(b, admitted, n)
			reportCPU(b, c0, n)
		})
	}
}

const numKeys = 1_000_000

var (
	keysOnce sync.Once
	keys1M   []string
)

// benchKeys returns 1,000,000 distinct 12-byte keys, "user:0000000" …
func benchKeys() []string {
	keysOnce.Do(func() {
		keys1M = make([]string, numKeys)
		for i := range keys1M {
			keys1M[i] = keyOf(i)
		}
	})
	return keys1M
}

func keyOf(i int) string {
	var b [16]byte
	buf := append(b[:0], "user:"...)
	s := strconv.AppendInt(nil, int64(i), 10)
	for range 7 - len(s) {
		buf = append(buf, '0')
	}
	return string(append(buf, s...))
}

// fill makes a limiter for keysSpec and takes one request for every key.
func fill(b *testing.B, c contender) (take, func()) {
	b.Helper()
	tk, done := c.make(b, keysSpec)
	for i, k := range benchKeys() {
		if !tk(k, at(i)) {
			b.Fatalf("%s: fill: %s denied", c.name, k)
		}
	}
	return tk, done
}

// BenchmarkKeys1M: 1,000,000 keys held by the limiter (filled before the
// timer starts); each operation takes from the next key in turn.
func BenchmarkKeys1M(b *testing.B) {
	keys := benchKeys()
	for _, c := range contenders() {
		if !c.keyed {
			continue
		}
		b.Run(c.name, func(b *testing.B) {
			tk, done := fill(b, c)
			defer done()
			b.ReportAllocs()
			var admitted, n int64
			i := numKeys
			c0 := cpuTime()
			for b.Loop() {
				if tk(keys[i%numKeys], at(i)) {
					admitted++
				}
				i++
				n++
			}
			report(b, admitted, n)
			reportCPU(b, c0, n)
		})
	}
}

// BenchmarkKeys1MParallel is BenchmarkKeys1M from every goroutine at once;
// each walks the key space from its own starting point with its own clock.
func BenchmarkKeys1MParallel(b *testing.B) {
	keys := benchKeys()
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
			c0 := cpuTime()
			b.RunParallel(func(pb *testing.PB) {
				i := numKeys + int(g.Add(1))*(numKeys/16+7)
				var a, k int64
				for pb.Next() {
					if tk(keys[i%numKeys], at(i)) {
						a++
					}
					i++
					k++
				}
				admitted.Add(a)
				n.Add(k)
			})
			report(b, admitted.Load(), n.Load())
			reportCPU(b, c0, n.Load())
		})
		done()
	}
}

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
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
	keys := benchKeys()
	for _, c := range contenders() {
		if !c.keyed {
			continue
		}
		b.Run(c.name, func(b *testing.B) {
			var perKey, perKeyStr, nsKey float64
			for range b.N {
				before := heapAlloc()
				start := time.Now()
				tk, done := fill(b, c)
				nsKey = float64(time.Since(start).Nanoseconds()) / numKeys
				perKey = float64(int64(heapAlloc())-int64(before)) / numKeys
				runtime.KeepAlive(tk)
				done()
				tk = nil

				before = heapAlloc()
				tk, done = c.make(b, keysSpec)
				for i := range numKeys {
					if !tk(keyOf(i), at(i)) {
						b.Fatalf("%s: fill: key %d denied", c.name, i)
					}
				}
				perKeyStr = float64(int64(heapAlloc())-int64(before)) / numKeys
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
		c0 := cpuTime()
		n := int64(0)
		for b.Loop() {
			x = spin(x)
			n++
		}
		reportCPU(b, c0, n)
		spinSink.Add(x)
	})
}

// BenchmarkCalibrateParallel is BenchmarkCalibrate from every goroutine.
func BenchmarkCalibrateParallel(b *testing.B) {
	b.Run("spin", func(b *testing.B) {
		var ops atomic.Int64
		c0 := cpuTime()
		b.RunParallel(func(pb *testing.PB) {
			x, n := int64(1), int64(0)
			for pb.Next() {
				x = spin(x)
				n++
			}
			spinSink.Add(x)
			ops.Add(n)
		})
		reportCPU(b, c0, ops.Load())
	})
}
