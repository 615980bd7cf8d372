package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// edgeLimits are valid limits at the edges of what Validate accepts: the
// largest rates, the longest periods and bursts (sluice.MaxHorizon), the
// tiniest period, coarse ticks, many segments.
var edgeLimits = []sluice.Limit{
	sluice.PerSecond(sluice.MaxRate(time.Second)),
	sluice.Every(sluice.MaxRate(time.Microsecond), time.Microsecond),
	sluice.Every(1, time.Microsecond),
	sluice.Every(1, (1<<50)*time.Microsecond), // horizon 2^52 µs exactly
	sluice.Every(3, (3<<49)*time.Microsecond), // horizon 2^52 µs exactly
	sluice.Every(1000, 70*365*24*time.Hour),
	sluice.PerSecond(1).WithBurst(1 << 31),
	sluice.Every(9, 50*365*24*time.Hour).WithSegments(9),
	sluice.PerDay(1_000_000),
	sluice.PerSecond(5),
}

// edgeNows are instants at the edges of the range a decision may be
// taken in (sluice.MinTime … MaxTime) and between.
var edgeNows = []time.Time{
	sluice.MinTime, sluice.MinTime.Add(time.Microsecond), sluice.MinTime.Add(36 * time.Hour),
	time.Date(2026, 11, 27, 7, 0, 0, 0, time.UTC), time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC),
	sluice.MaxTime.Add(-time.Hour), sluice.MaxTime,
}

// TestEdgesRedisEqualsMemory: at the edges of every range (limits, times,
// costs up to MaxInt64, reports), Redis' scripts decide exactly as memory,
// and every figure is sane.
func TestEdgesRedisEqualsMemory(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	rs := open(t, redisstore.Options{Addrs: []string{srv.Addr}, Prefix: fmt.Sprintf("edge:%d:", time.Now().UnixNano())})
	mem := memstore.New(memstore.Options{})
	for _, alg := range sluice.Algorithms() {
		for li, l := range edgeLimits {
			if alg == sluice.SlidingWindowLog && l.Rate > 1000 {
				continue // memory keeps one time per unit: not these rates
			}
			if l.Burst != 0 && l.Burst != l.Rate && !alg.TakesBurst() {
				continue // a window takes no burst
			}
			for ni, now := range edgeNows {
				key := fmt.Sprintf("%v/%d/%d", alg, li, ni)
				b := l.BurstOrRate()
				clamp := func(t time.Time) time.Time {
					if t.After(sluice.MaxTime) {
						return sluice.MaxTime
					}
					if t.Before(sluice.MinTime) {
						return sluice.MinTime
					}
					return t
				}
				steps := []sluice.Request{
					{Cost: b, Now: now},
					{Cost: 1, Now: clamp(now.Add(time.Microsecond))},
					{Cost: math.MaxInt64, Now: clamp(now.Add(3 * time.Microsecond)), Force: true},
					{Cost: 1, Now: clamp(now.Add(time.Second))},
					{Cost: math.MaxInt64, Now: clamp(now.Add(time.Second))},
					{Cost: b, Now: clamp(now.Add(l.Period))},
					{Cost: 0, Now: clamp(now.Add(time.Hour))},
				}
				for i, r := range steps {
					r.Key, r.Algorithm, r.Limit = key, alg, l
					name := fmt.Sprintf("%v %v (burst %d, segments %d) at %v, step %d (cost %d, force %v)", alg, l, l.Burst, l.Segments, now, i, r.Cost, r.Force)
					md, merr := mem.Take(ctx, r)
					rd, rerr := rs.Take(ctx, r)
					if merr != nil || rerr != nil {
						t.Fatalf("%s: memory %v, redis %v", name, merr, rerr)
					}
					if md != rd {
						t.Fatalf("%s: memory %+v, redis %+v", name, md, rd)
					}
					if md.Remaining < 0 || md.ResetAfter < 0 || md.Delay < 0 || md.RetryAfter < 0 && md.RetryAfter != sluice.Never {
						t.Fatalf("%s: %+v, want no negative figure", name, md)
					}
				}
				// The general scripts (TakeAll with two requests) too.
				two := []sluice.Request{
					{Key: key + "/all", Algorithm: alg, Limit: l, Cost: 1, Now: now},
					{Key: key + "/all", Algorithm: alg, Limit: l, Cost: math.MaxInt64, Now: now, Force: true},
				}
				for i := range 3 {
					md, rd := make([]sluice.Decision, 2), make([]sluice.Decision, 2)
					merr, rerr := mem.TakeAll(ctx, two, md), rs.TakeAll(ctx, two, rd)
					if merr != nil || rerr != nil || md[0] != rd[0] || md[1] != rd[1] {
						t.Fatalf("%v %v at %v: TakeAll %d: memory %+v %v, redis %+v %v", alg, l, now, i, md, merr, rd, rerr)
					}
					two[0].Now, two[1].Now = clamp(now.Add(time.Duration(i+1)*time.Second)), clamp(now.Add(time.Duration(i+1)*time.Second))
				}
			}
		}
	}
}

// TestTimeOutOfRange: a time outside MinTime … MaxTime, the zero
// time.Time of a Request without Now among them, is refused by both stores
// alike, before anything is counted. Such times were decided: before 1970
// a new key of GCRA or the windows was not new (its zero state lies at the
// epoch, after now: a GCRA key refused its first request), and past 2^53
// µs Redis' doubles rounded now, so Redis and memory disagreed.
func TestTimeOutOfRange(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	rs := open(t, redisstore.Options{Addrs: []string{srv.Addr}, Prefix: fmt.Sprintf("range:%d:", time.Now().UnixNano())})
	mem := memstore.New(memstore.Options{})
	for _, alg := range sluice.Algorithms() {
		for _, bad := range []time.Time{{}, sluice.MinTime.Add(-time.Microsecond), time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC), sluice.MaxTime.Add(time.Microsecond), time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC), time.UnixMicro(math.MaxInt64)} {
			for _, force := range []bool{false, true} {
				r := sluice.Request{Key: "k/" + alg.String(), Algorithm: alg, Limit: sluice.PerSecond(5), Cost: 1, Now: bad, Force: force}
				if _, err := mem.Take(ctx, r); !errors.Is(err, sluice.ErrInvalidTime) {
					t.Errorf("%v at %v (force %v): memory Take error %v, want ErrInvalidTime", alg, bad, force, err)
				}
				if _, err := rs.Take(ctx, r); !errors.Is(err, sluice.ErrInvalidTime) {
					t.Errorf("%v at %v (force %v): redis Take error %v, want ErrInvalidTime", alg, bad, force, err)
				}
				if _, _, err := rs.SyncTake(ctx, r); !errors.Is(err, sluice.ErrInvalidTime) {
					t.Errorf("%v at %v: SyncTake error %v, want ErrInvalidTime", alg, bad, err)
				}
				if _, err := rs.Lease(ctx, r, redisstore.ReturnOp{}); !errors.Is(err, sluice.ErrInvalidTime) {
					t.Errorf("%v at %v: Lease error %v, want ErrInvalidTime", alg, bad, err)
				}
				two := []sluice.Request{r, r}
				two[0].Now = time.Unix(1_700_000_000, 0)
				for name, s := range map[string]sluice.Store{"memory": mem, "redis": rs} {
					if err := s.TakeAll(ctx, two, make([]sluice.Decision, 2)); !errors.Is(err, sluice.ErrInvalidTime) {
						t.Errorf("%v at %v (force %v): %s TakeAll error %v, want ErrInvalidTime", alg, bad, force, name, err)
					}
				}
			}
		}
		// Nothing was counted: the key is new at a valid time.
		r := sluice.Request{Key: "k/" + alg.String(), Algorithm: alg, Limit: sluice.PerSecond(5), Cost: 5, Now: time.Unix(1_700_000_000, 0)}
		for name, s := range map[string]sluice.Store{"memory": mem, "redis": rs} {
			if d, err := s.Take(ctx, r); err != nil || !d.Allowed {
				t.Errorf("%v: %s Take(cost 5) after the refused ones = %+v, %v; want allowed", alg, name, d, err)
			}
		}
	}
	// With Redis' clock, Request.Now is not read: the zero time is fine.
	rt := open(t, redisstore.Options{Addrs: []string{srv.Addr}, RedisTime: true, Prefix: fmt.Sprintf("rangetime:%d:", time.Now().UnixNano())})
	for _, alg := range sluice.Algorithms() {
		if d, err := rt.Take(ctx, sluice.Request{Key: "k/" + alg.String(), Algorithm: alg, Limit: sluice.PerSecond(5), Cost: 1}); err != nil || !d.Allowed {
			t.Errorf("%v with RedisTime, zero Now: %+v, %v; want allowed", alg, d, err)
		}
	}
}

// TestFarBehindRedisEqualsMemory: a request whose clock is far behind the
// key's state (minutes to a century) at the largest rates, where the debt
// at its time, behind × Rate, passes 2^63: memory used to overflow (a GCRA
// or leaky bucket debt gone negative admits), and Redis to round. Both must
// refuse it, count nothing, and agree on every figure, for Take, reports
// and TakeAll.
func TestFarBehindRedisEqualsMemory(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	rs := open(t, redisstore.Options{Addrs: []string{srv.Addr}, Prefix: fmt.Sprintf("behind:%d:", time.Now().UnixNano())})
	mem := memstore.New(memstore.Options{})
	t1 := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	limits := []sluice.Limit{
		sluice.PerSecond(sluice.MaxRate(time.Second)),
		sluice.Every(sluice.MaxRate(time.Microsecond), time.Microsecond),
		sluice.PerSecond(1_000_000_000).WithBurst(3),
		sluice.PerDay(1_000_000),
		sluice.Every(1000, 70*365*24*time.Hour),
	}
	for _, alg := range []sluice.Algorithm{sluice.GCRA, sluice.LeakyBucket, sluice.TokenBucket} {
		for li, l := range limits {
			for _, back := range []time.Duration{17 * time.Minute, 25 * time.Hour, 400 * 24 * time.Hour, 100 * 365 * 24 * time.Hour} {
				key := fmt.Sprintf("%v/%d/%v", alg, li, back)
				b := l.BurstOrRate()
				steps := []sluice.Request{
					{Cost: b, Now: t1},
					{Cost: 1, Now: t1.Add(-back)},
					{Cost: 0, Now: t1.Add(-back - time.Second)},
					{Cost: b, Now: t1.Add(-back)},
					{Cost: b + 2, Now: t1.Add(-back)},
					{Cost: 3, Now: t1.Add(-back), Force: true},
					{Cost: math.MaxInt64, Now: t1.Add(-back / 2), Force: true},
					{Cost: 1, Now: t1.Add(time.Microsecond)},
					{Cost: 1, Now: t1.Add(-back)},
					{Cost: 1, Now: t1.Add(min(l.Period, 24*time.Hour))},
				}
				for i, r := range steps {
					r.Key, r.Algorithm, r.Limit = key, alg, l
					name := fmt.Sprintf("%v %v (burst %d), %v back, step %d (cost %d, force %v)", alg, l, l.Burst, back, i, r.Cost, r.Force)
					md, merr := mem.Take(ctx, r)
					rd, rerr := rs.Take(ctx, r)
					if merr != nil || rerr != nil {
						t.Fatalf("%s: memory %v, redis %v", name, merr, rerr)
					}
					if md != rd {
						t.Fatalf("%s: memory %+v, redis %+v", name, md, rd)
					}
					if md.Remaining < 0 || md.ResetAfter < 0 || md.Delay < 0 || md.RetryAfter < 0 && md.RetryAfter != sluice.Never {
						t.Fatalf("%s: %+v, want no negative figure", name, md)
					}
					if alg != sluice.LeakyBucket && r.Now.Before(t1) && md.Allowed && r.Cost > 0 && i > 0 && i < 7 {
						t.Fatalf("%s: %+v, want refused: the bucket is empty at t1 and the clock behind", name, md)
					}
				}
				two := []sluice.Request{
					{Key: key, Algorithm: alg, Limit: l, Cost: 1, Now: t1.Add(-back)},
					{Key: key, Algorithm: alg, Limit: l, Cost: 5, Now: t1.Add(-back), Force: true},
				}
				md, rd := make([]sluice.Decision, 2), make([]sluice.Decision, 2)
				merr, rerr := mem.TakeAll(ctx, two, md), rs.TakeAll(ctx, two, rd)
				if merr != nil || rerr != nil || md[0] != rd[0] || md[1] != rd[1] {
					t.Fatalf("%v %v, %v back: TakeAll: memory %+v %v, redis %+v %v", alg, l, back, md, merr, rd, rerr)
				}
			}
		}
	}
}

// TestCostPast2To53: a cost above 2^53 is not a Lua number exactly: 2^53+1
// was read as 2^53, which a leaky bucket of burst 2^53-1 admits (Burst+1),
// so Redis' general script answered a retry of 1µs where memory answers
// Never. Every store must see the cost it was given.
func TestCostPast2To53(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	rs := open(t, redisstore.Options{Addrs: []string{srv.Addr}, Prefix: fmt.Sprintf("cost:%d:", time.Now().UnixNano())})
	mem := memstore.New(memstore.Options{})
	l := sluice.Every(sluice.MaxRate(time.Microsecond), time.Microsecond) // burst 2^53-1
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, alg := range sluice.Algorithms() {
		if alg.ValidateLimit(l) != nil {
			continue
		}
		for _, cost := range []int64{1<<53 - 1, 1 << 53, 1<<53 + 1, 1<<53 + 2, 1<<53 + 3, math.MaxInt64} {
			for _, force := range []bool{false, true} {
				key := fmt.Sprintf("%v/%d/%v", alg, cost, force)
				two := []sluice.Request{
					{Key: key, Algorithm: alg, Limit: l, Cost: cost, Now: now, Force: force},
					{Key: key + "/b", Algorithm: alg, Limit: l, Cost: 0, Now: now},
				}
				for i := range 2 {
					md, rd := make([]sluice.Decision, 2), make([]sluice.Decision, 2)
					merr, rerr := mem.TakeAll(ctx, two, md), rs.TakeAll(ctx, two, rd)
					if merr != nil || rerr != nil || md[0] != rd[0] {
						t.Errorf("%v cost %d force %v, call %d: memory %+v %v, redis %+v %v", alg, cost, force, i, md[0], merr, rd[0], rerr)
					}
				}
			}
		}
	}
}
