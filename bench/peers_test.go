package bench

import (
	"context"
	"math"
	"sync"
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
