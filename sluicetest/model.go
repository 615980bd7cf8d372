package sluicetest

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// ModelLimits are the limits testModel runs: short periods (the models
// count every microsecond), whole and fractional spacings, bursts above and
// below the rate, a rate of 1, and segments.
func ModelLimits() []sluice.Limit {
	return []sluice.Limit{
		sluice.Every(3, time.Millisecond),
		sluice.Every(5, 2*time.Millisecond).WithBurst(2),
		sluice.Every(7, 3500*time.Microsecond).WithBurst(12),
		sluice.Every(1, 700*time.Microsecond),
		sluice.Every(6, 1200*time.Microsecond).WithSegments(3),
		sluice.Every(10, 4*time.Millisecond).WithSegments(4),
	}
}

// testModel replays random traces (times never going back) through s and
// through the models, and requires the same decisions: every field, for
// requests of every cost, forced charges included.
func testModel(t *testing.T, s sluice.Store) {
	ctx := context.Background()
	sd := seed(t)
	for _, alg := range sluice.Algorithms() {
		for li, l := range ModelLimits() {
			if skipLimit(alg, l) {
				continue
			}
			rng := rand.New(rand.NewPCG(sd, 1000+uint64(li)*16+uint64(alg)))
			prefix := uniq(t, fmt.Sprintf("%s/%d/", alg, li))
			models := map[int]model{}
			for i, st := range randomTrace(rng, 400, 2, l) {
				m := models[st.key]
				if m == nil {
					m = newModel(alg, l)
					models[st.key] = m
				}
				now := T0.Add(st.at)
				want := modelDecision(m, l, now.UnixMicro(), st.cost, st.force)
				got, err := s.Take(ctx, sluice.Request{Key: fmt.Sprintf("%s%d", prefix, st.key), Algorithm: alg, Limit: l, Cost: st.cost, Now: now, Force: st.force})
				if err != nil {
					t.Fatalf("%s %v step %d: Take: %v", alg, l, i, err)
				}
				if got != want {
					t.Fatalf("%s %v step %d (seed %d): Take(key %d, t0+%v, cost %d, force %v) = %+v, the model says %+v", alg, l, i, sd, st.key, st.at, st.cost, st.force, got, want)
				}
			}
		}
	}
}

// The models below are the six algorithms as the documentation states
// them, written the plainest way and independently of the state machines
// in package sluice: a bucket of tokens, a queue of units leaving one
// spacing apart, a count per window, a list of admission times, a count per
// sub-window. Times are whole microseconds, non-decreasing; the limits are
// short (every count fits the microsecond tick). What the decisions mean is
// defined, not computed: RetryAfter is the shortest wait after which the
// same request is admitted if nothing else arrives (searched for on a copy
// of the model), ResetAfter the shortest wait after which the limit is full
// again, Remaining how many requests of cost 1 a copy admits at once.

// model is one key's state under one algorithm.
type model interface {
	// take decides a request of cost at now (µs), counting it if admitted
	// or, with force, in any case; it reports whether it fitted, and the
	// leaky bucket's delay in µs.
	take(now, cost int64, force bool) (ok bool, delay int64)
	// full reports whether the limit is back at full capacity at now,
	// without changing anything.
	full(now int64) bool
	// capacity is the largest cost ever admitted.
	capacity() int64
	clone() model
}

func newModel(alg sluice.Algorithm, l sluice.Limit) model {
	p := l.Period.Microseconds()
	switch alg {
	case sluice.TokenBucket, sluice.GCRA:
		b := l.BurstOrRate()
		return &bucketModel{rate: l.Rate, period: p, burst: b, tokens: b * p}
	case sluice.LeakyBucket:
		return &queueModel{rate: l.Rate, period: p, burst: l.BurstOrRate(), last: math.MinInt64 / 4}
	case sluice.FixedWindow:
		return &fixedModel{rate: l.Rate, period: p}
	case sluice.SlidingWindowLog:
		return &logModel{rate: l.Rate, period: p}
	default:
		s := int64(max(1, l.Segments))
		return &counterModel{rate: l.Rate, sub: p / s, segs: s, counts: map[int64]int64{}}
	}
}

// testModelTakeAll replays random pairs of requests, each pair under two
// algorithms and limits, through s.TakeAll and through the models: a pair
// is counted only when both are admitted (or forced), and a request denied
// by the other's limit consumes nothing. The decisions of a pair that is
// counted must be the models'; of one that is not, the verdicts.
func testModelTakeAll(t *testing.T, s sluice.Store) {
	ctx := context.Background()
	sd := seed(t)
	rng := rand.New(rand.NewPCG(sd, 2000))
	algs, limits := sluice.Algorithms(), ModelLimits()[:4]
	for round := range 12 {
		alg := [2]sluice.Algorithm{algs[rng.IntN(len(algs))], algs[rng.IntN(len(algs))]}
		l := [2]sluice.Limit{limits[rng.IntN(len(limits))], limits[rng.IntN(len(limits))]}
		for j := range 2 {
			if isWindow(alg[j]) {
				l[j].Burst = 0 // a window takes no burst
			}
		}
		key := [2]string{uniq(t, fmt.Sprintf("%d/a", round)), uniq(t, fmt.Sprintf("%d/b", round))}
		m := [2]model{newModel(alg[0], l[0]), newModel(alg[1], l[1])}
		a, b := randomTrace(rng, 150, 1, l[0]), randomTrace(rng, 150, 1, l[1])
		denied := 0
		for i := range a {
			// One instant for both: the first trace's; the second's costs.
			now := T0.Add(a[i].at)
			st := [2]traceStep{a[i], b[i]}
			qs := make([]sluice.Request, 2)
			want := make([]sluice.Decision, 2)
			next := [2]model{m[0].clone(), m[1].clone()}
			all := true
			for j := range 2 {
				qs[j] = sluice.Request{Key: key[j], Algorithm: alg[j], Limit: l[j], Cost: st[j].cost, Now: now, Force: st[j].force}
				want[j] = modelDecision(next[j], l[j], now.UnixMicro(), st[j].cost, st[j].force)
				all = all && (want[j].Allowed || st[j].force)
			}
			if all {
				m = next
			} else {
				denied++
			}
			got := make([]sluice.Decision, 2)
			if err := s.TakeAll(ctx, qs, got); err != nil {
				t.Fatalf("round %d step %d: TakeAll: %v", round, i, err)
			}
			for j := range 2 {
				if !all && got[j].Allowed == want[j].Allowed {
					// Counted by neither: only the verdicts must agree.
					// (The fleet decorators report what is left for a
					// request they asked without counting, which the
					// Envoy edge relies on; the counts of the steps
					// after tell whether anything was counted.)
					continue
				}
				if got[j] != want[j] {
					t.Fatalf("round %d step %d (seed %d): TakeAll(%s %v cost %d force %v, %s %v cost %d force %v) at t0+%v: request %d = %+v, the model says %+v",
						round, i, sd, alg[0], l[0], st[0].cost, st[0].force, alg[1], l[1], st[1].cost, st[1].force, a[i].at, j, got[j], want[j])
				}
			}
		}
		if denied == 0 {
			t.Errorf("round %d: no pair was denied: the trace did not exercise all-or-nothing", round)
		}
	}
}

// modelDecision decides a request on m and fills in a Decision from the
// definitions.
func modelDecision(m model, limit sluice.Limit, now, cost int64, force bool) sluice.Decision {
	ok, delay := m.take(now, cost, force)
	d := sluice.Decision{Allowed: ok, Limit: limit.Rate, Delay: us(delay)}
	// Remaining: requests of cost 1 a copy admits at this instant.
	c := m.clone()
	for c.capacity() > d.Remaining {
		if ok, _ := c.take(now, 1, false); !ok {
			break
		}
		d.Remaining++
	}
	d.ResetAfter = us(search(func(w int64) bool { return m.full(now + w) }))
	if !ok {
		want := cost
		if force {
			want = 1 // a charge's RetryAfter is for a request of cost 1
		}
		if want > m.capacity() {
			d.RetryAfter = sluice.Never
		} else {
			d.RetryAfter = us(search(func(w int64) bool {
				ok, _ := m.clone().take(now+w, want, false)
				return ok
			}))
		}
	}
	return d
}

func us(n int64) time.Duration { return time.Duration(n) * time.Microsecond }

// search returns the least w ≥ 0 for which ok holds; ok must be monotone
// (false, then true for good), as waiting is for every model.
func search(ok func(w int64) bool) int64 {
	hi := int64(1)
	for !ok(hi) {
		hi *= 2
		if hi > 1<<45 {
			panic("sluicetest: model search does not end")
		}
	}
	lo := int64(-1) // ok(lo) is false, or lo < 0
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if ok(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// bucketModel is a bucket of burst tokens, starting full, refilled at rate
// per period; tokens are kept × period so that the refill is whole. A
// charge may take it below zero.
type bucketModel struct {
	rate, period, burst int64
	tokens, at          int64
}

func (b *bucketModel) refill(now int64) {
	if now > b.at {
		b.tokens = min(b.burst*b.period, b.tokens+(now-b.at)*b.rate)
		b.at = now
	}
}

func (b *bucketModel) take(now, cost int64, force bool) (bool, int64) {
	b.refill(now)
	ok := cost <= b.burst && b.tokens >= cost*b.period
	if ok || force {
		b.tokens -= cost * b.period
	}
	return ok, 0
}

func (b *bucketModel) full(now int64) bool {
	c := *b
	c.refill(now)
	return c.tokens == c.burst*c.period
}

func (b *bucketModel) capacity() int64 { return b.burst }
func (b *bucketModel) clone() model    { c := *b; return &c }

// queueModel is a queue whose units leave one spacing (period/rate) apart,
// in time counted in 1/rate µs so that the spacing is whole: a request of
// cost n is n units, behind the last one queued and never before now; it
// is admitted when at most burst units wait behind the one leaving first,
// and it leaves (its Delay) with its last unit. last is the last unit's
// leave time. A charge that does not fit queues its units behind the
// last one, or from now if the queue is empty, and nothing waits for it.
type queueModel struct {
	rate, period, burst int64
	last                int64
}

func (q *queueModel) take(now, cost int64, force bool) (bool, int64) {
	n := now * q.rate
	first := max(n, q.last+q.period)
	if cost == 0 { // asks without queueing: admitted unless over capacity
		if q.last-n > q.burst*q.period {
			return false, 0
		}
		return true, ceilDiv(max(0, q.last-n), q.rate)
	}
	end := first + (cost-1)*q.period
	if cost <= q.burst+1 && end-n <= q.burst*q.period {
		q.last = end
		return true, ceilDiv(end-n, q.rate)
	}
	if force {
		q.last = max(n, q.last) + cost*q.period
	}
	return false, 0
}

func (q *queueModel) full(now int64) bool { return q.last+q.period <= now*q.rate }
func (q *queueModel) capacity() int64     { return q.burst + 1 }
func (q *queueModel) clone() model        { c := *q; return &c }

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b } // a ≥ 0, b > 0

// fixedModel counts per window [w × period, (w+1) × period).
type fixedModel struct {
	rate, period int64
	window, n    int64
}

func (f *fixedModel) at(now int64) {
	if w := now / f.period; w != f.window {
		f.window, f.n = w, 0
	}
}

func (f *fixedModel) take(now, cost int64, force bool) (bool, int64) {
	f.at(now)
	ok := f.n+cost <= f.rate
	if ok || force {
		f.n += cost
	}
	return ok, 0
}

func (f *fixedModel) full(now int64) bool { c := *f; c.at(now); return c.n == 0 }
func (f *fixedModel) capacity() int64     { return f.rate }
func (f *fixedModel) clone() model        { c := *f; return &c }

// logModel keeps every admitted unit's time; the window is (now − period, now].
type logModel struct {
	rate, period int64
	log          []int64
}

func (m *logModel) in(now int64) int64 {
	n := int64(0)
	for _, t := range m.log {
		if t > now-m.period {
			n++
		}
	}
	return n
}

func (m *logModel) take(now, cost int64, force bool) (bool, int64) {
	ok := m.in(now)+cost <= m.rate
	if ok || force {
		for range cost {
			m.log = append(m.log, now)
		}
	}
	return ok, 0
}

func (m *logModel) full(now int64) bool { return m.in(now) == 0 }
func (m *logModel) capacity() int64     { return m.rate }
func (m *logModel) clone() model {
	return &logModel{rate: m.rate, period: m.period, log: append([]int64(nil), m.log...)}
}

// counterModel counts per sub-window of sub µs; at now in sub-window k the
// estimate is floor(count[k−segs] × overlap / sub) + count[k−segs+1 … k],
// the overlap being what of the oldest sub-window the sliding period
// still covers.
type counterModel struct {
	rate, sub, segs int64
	counts          map[int64]int64
}

func (c *counterModel) estimate(now int64) int64 {
	k := now / c.sub
	est := c.counts[k-c.segs] * ((k+1)*c.sub - now) / c.sub
	for j := k - c.segs + 1; j <= k; j++ {
		est += c.counts[j]
	}
	return est
}

func (c *counterModel) take(now, cost int64, force bool) (bool, int64) {
	ok := c.estimate(now)+cost <= c.rate
	if ok || force {
		c.counts[now/c.sub] += cost
	}
	return ok, 0
}

func (c *counterModel) full(now int64) bool { return c.estimate(now) == 0 }
func (c *counterModel) capacity() int64     { return c.rate }
func (c *counterModel) clone() model {
	m := &counterModel{rate: c.rate, sub: c.sub, segs: c.segs, counts: make(map[int64]int64, len(c.counts))}
	for k, v := range c.counts {
		m.counts[k] = v
	}
	return m
}
