package sluice

import "sort"

// Per key, time never runs backwards in the window algorithms: a request
// older than the key's newest state is counted at that state's time. (The
// buckets need no such rule.) This keeps a store fed by clocks a little
// apart consistent instead of resetting counters. Its waits (retry, reset)
// are still told from its own now: retried that much later on its clock,
// it is admitted.

// fixedWindow counts in windows [w×Period, (w+1)×Period) since the epoch.
func fixedWindow(st *State, p *params, now, cost int64, force bool, o *outcome) {
	w := max(floorDiv(now, p.period), st.T)
	if w != st.T {
		st.T, st.N = w, 0
	}
	end := (w + 1) * p.period
	switch {
	case cost <= p.rate && st.N+cost <= p.rate:
		o.allowed = true
		st.N += cost
	case force: // over the rate until the window ends
		addCapped(&st.N, cost, 1, max(1<<50, p.rate+1))
		o.retry = end - now
	case cost > p.rate:
		o.retry = -1
	default:
		o.retry = end - now
	}
	o.remaining = max(0, p.rate-st.N)
	if st.N > 0 {
		o.reset = end - now
	}
	o.idle = end
}

// slidingLog admits while the admissions in (now − Period, now] plus cost
// stay within Rate. The log holds one time per unit of cost, so at most Rate.
//
// A forced charge that does not fit appends min(cost, Rate+1) entries and
// keeps the newest Rate+1: those alone decide every later request (with
// Rate+1 entries in the window nothing is admitted, and with Rate or fewer
// they are the newest), exactly as the whole log would.
func slidingLog(st *State, p *params, now, cost int64, force bool, o *outcome) {
	// at is the instant the request is counted at: now, or the log's
	// newest time when later (see the top of this file). Its waits are
	// told from its own now.
	at := now
	if n := len(st.Log); n > 0 && st.Log[n-1] > now {
		at = st.Log[n-1]
	}
	cut := at - p.period
	st.Log = st.Log[expired(st.Log, cut):]
	switch n := int64(len(st.Log)); {
	case cost <= p.rate && n+cost <= p.rate:
		o.allowed = true
		for range cost {
			st.Log = append(st.Log, at)
		}
	case force:
		for range min(cost, p.rate+1) {
			st.Log = append(st.Log, at)
		}
		if n = int64(len(st.Log)); n > p.rate+1 {
			// Only the newest Rate+1 entries decide anything from now on.
			st.Log = st.Log[n-p.rate-1:]
			n = p.rate + 1
		}
		o.retry = st.Log[n-p.rate] + p.period - now // for a cost of 1
	case cost > p.rate:
		o.retry = -1
	default:
		o.retry = st.Log[n+cost-p.rate-1] + p.period - now
	}
	n := len(st.Log)
	o.remaining = max(0, p.rate-int64(n))
	o.idle = at
	if n > 0 {
		o.idle = st.Log[n-1] + p.period
		o.reset = o.idle - now
	} else {
		st.Log = nil
	}
}

// expired returns how many times at the front of log (sorted, oldest
// first) are at or before cut. A log under steady traffic loses one or
// two per decision, so the first few are looked at one by one before a
// binary search over the rest.
func expired(log []int64, cut int64) int {
	const scan = 4
	for i := range min(len(log), scan) {
		if log[i] > cut {
			return i
		}
	}
	if len(log) <= scan {
		return len(log)
	}
	rest := log[scan:]
	return scan + sort.Search(len(rest), func(i int) bool { return rest[i] > cut })
}

// counts reads and writes the sub-window counts of a sliding window counter
// whose newest sub-window is st.T.
type counts struct {
	st *State
	s  int64
}

func (c counts) slot(j int64) *int64 {
	if c.s == 1 {
		if j == c.st.T {
			return &c.st.N
		}
		return &c.st.M
	}
	m := j % (c.s + 1)
	if m < 0 {
		m += c.s + 1
	}
	return &c.st.Log[m]
}

// get is the count of sub-window j: 0 outside [T−s, T].
func (c counts) get(j int64) int64 {
	if j > c.st.T || j < c.st.T-c.s {
		return 0
	}
	return *c.slot(j)
}

// advance makes k the newest sub-window, zeroing those that leave.
func (c counts) advance(k int64) {
	if c.s > 1 && c.st.Log == nil {
		c.st.Log = make([]int64, c.s+1)
	}
	for j := c.st.T + 1; j <= k && j <= c.st.T+c.s+1; j++ {
		if c.s == 1 {
			c.st.M, c.st.N = c.st.N, 0
		} else {
			*c.slot(j) = 0
		}
	}
	c.st.T = max(c.st.T, k)
}

// slidingCounter is the classic estimate: sub-windows of Period/Segments
// ticks; at now in sub-window k it admits while
// floor(oldest × overlap) + newer + cost ≤ Rate.
//
// A forced charge that does not fit adds its cost to the newest sub-window,
// up to max(Rate+1, 2^49/Period) (exact integers for the estimate's product).
func slidingCounter(st *State, p *params, now, cost int64, force bool, o *outcome) {
	if p.segments == 1 {
		slidingCounter1(st, p, now, cost, force, o)
		return
	}
	slidingCounterN(st, p, now, cost, force, o)
}

// slidingCounter1 is slidingCounterN for one segment (the common case),
// written out: the state is (T, N, M) = (window, its count, the previous
// window's count), and every loop over sub-windows has one or two turns.
// It decides exactly as slidingCounterN (a test compares the two).
func slidingCounter1(st *State, p *params, now, cost int64, force bool, o *outcome) {
	l := p.period
	k := floorDiv(now, l)
	// A request before the newest window is counted at its start (see
	// the top of this file), its waits told from its own now: behind.
	behind := int64(0)
	if k < st.T {
		k = st.T
		behind = k*l - now
		now = k * l
	}
	switch {
	case k == st.T+1:
		st.M, st.N = st.N, 0
	case k > st.T+1:
		st.M, st.N = 0, 0
	}
	st.T = k
	est := st.M*((k+1)*l-now)/l + st.N
	switch {
	case cost <= p.rate && est+cost <= p.rate:
		o.allowed = true
		st.N += cost
		est += cost
	case force:
		before := st.N
		addCapped(&st.N, cost, 1, max(p.rate+1, (1<<49)/p.period))
		est += st.N - before
		o.retry = counterWait1(st, p, now, 1)
	case cost > p.rate:
		o.retry = -1
	default:
		o.retry = counterWait1(st, p, now, cost)
	}
	o.remaining = max(0, p.rate-est)
	if est > 0 {
		o.reset = counterWait1(st, p, now, p.rate) + behind
	}
	if o.retry >= 0 {
		o.retry += behind
	}
	o.idle = (st.T + 2) * l
}

// counterWait1 is counterWait for one segment, whose newest window st.T
// holds st.N and the one before st.M: the walk over windows k, k+1, k+2
// written out.
func counterWait1(st *State, p *params, now, n int64) int64 {
	k, l := st.T, p.period
	if m := p.rate - n - st.N; m >= 0 {
		start := max(now, k*l)
		if st.M == 0 {
			return start - now
		}
		if xmax := ceilDiv((m+1)*l, st.M) - 1; xmax >= 1 {
			if t := max(start, (k+1)*l-xmax); t < (k+1)*l {
				return t - now
			}
		}
	}
	// From window k+1 only st.N is left, then nothing.
	m := p.rate - n
	if m < 0 {
		return -1
	}
	start := max(now, (k+1)*l)
	if st.N == 0 {
		return start - now
	}
	if xmax := ceilDiv((m+1)*l, st.N) - 1; xmax >= 1 {
		if t := max(start, (k+2)*l-xmax); t < (k+2)*l {
			return t - now
		}
	}
	return max(now, (k+2)*l) - now
}

// slidingCounterN is slidingCounter for any number of segments.
func slidingCounterN(st *State, p *params, now, cost int64, force bool, o *outcome) {
	s, l := p.segments, p.period/p.segments
	c := counts{st: st, s: s}
	k := floorDiv(now, l)
	behind := int64(0) // as in slidingCounter1
	if k < st.T {
		k = st.T
		behind = k*l - now
		now = k * l
	}
	c.advance(k)
	newer := int64(0)
	for j := k - s + 1; j <= k; j++ {
		newer += c.get(j)
	}
	est := c.get(k-s)*((k+1)*l-now)/l + newer
	switch {
	case cost <= p.rate && est+cost <= p.rate:
		o.allowed = true
		*c.slot(k) += cost
		est += cost
	case force:
		sl := c.slot(k)
		before := *sl
		addCapped(sl, cost, 1, max(p.rate+1, (1<<49)/p.period))
		est += *sl - before
		o.retry = counterWait(c, p, k, now, 1)
	case cost > p.rate:
		o.retry = -1
	default:
		o.retry = counterWait(c, p, k, now, cost)
	}
	o.remaining = max(0, p.rate-est)
	if est > 0 {
		o.reset = counterWait(c, p, k, now, p.rate) + behind
	}
	if o.retry >= 0 {
		o.retry += behind
	}
	o.idle = (st.T + s + 1) * l
}

// counterWait returns the ticks from now until a request of cost n would be
// admitted if nothing else arrived: it walks sub-windows k, k+1, … (each
// shifts one count out) and, within one, solves
// floor(oldest × x / l) ≤ Rate − n − newer for the overlap x.
func counterWait(c counts, p *params, k, now, n int64) int64 {
	s, l := p.segments, p.period/p.segments
	newer := int64(0)
	for j := k - s + 1; j <= k; j++ {
		newer += c.get(j)
	}
	for j := k; j <= k+s+1; j++ {
		if j > k {
			newer += c.get(j) - c.get(j-s)
		}
		m := p.rate - n - newer
		if m < 0 {
			continue
		}
		start := max(now, j*l)
		oldest := c.get(j - s)
		if oldest == 0 {
			return start - now
		}
		// floor(oldest × x / l) ≤ m  ⇔  x ≤ ceil((m+1) × l / oldest) − 1
		if xmax := ceilDiv((m+1)*l, oldest) - 1; xmax >= 1 {
			if t := max(start, (j+1)*l-xmax); t < (j+1)*l {
				return t - now
			}
		}
	}
	return -1 // not reached: after s+1 sub-windows every count is gone
}
