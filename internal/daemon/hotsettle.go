package daemon

import (
	"context"
	"slices"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// Settling a move (see hotseed.go)
//
// The instance that moves a key reads the counter the key leaves once,
// at its exchange; the other instances switch at their own refresh, up to
// HotKeysRefresh (and an exchange) later, and until then decide on that
// counter. So at its next settleRounds refreshes the moving instance reads
// that counter again and charges the counter the key went to with what it
// took since it was last read: what it holds less than it would hold had
// it taken nothing, refilled meanwhile. Read as "used" alone (capacity
// less Remaining), a counter that refilled hid as much of what the late
// instances took: in a steady overload, all of it (the counter is out at
// every reading), a second or two of the rate admitted twice.
//
// What it would hold is reckoned on the counter's own clock, the one its
// decisions use (Redis's, or the requests'), from what a reading returns
// with its answer: the counter's state and the instant it was read at
// (redisstore.Store.CounterState; sluice.Algorithm.RemainingAt, exact),
// for every algorithm but sliding_window_log, read by the units it logged
// since the last reading (redisstore.Store.LoggedSince). Reckoned from
// the answers' ResetAfter over the time between the readings on this
// instance's clock (the first's answer to the second's question, the
// least Redis's could have moved), a window that turned within the
// readings' round trips of the second read as not turned: what the late
// instances took of the new window was carried not at all, and the
// shards, seeded in the window before, admitted it again (300 in two
// windows of 100, on a loaded machine).
//
// An instance whose exchange fails decides
// on the counter left until one succeeds: after the first settleRounds,
// the counter is read again as long as a reading finds something taken.
// Not carried: what such an instance takes after a reading that found
// nothing (it took nothing for a refresh), or after the key's time in the
// fleet's set: at most its limit in a window, as unsharded. A steady late
// switch costs nothing. Nothing is settled for a key that moved again, or
// that this instance no longer holds where the move put it.

// settleRounds is how many refreshes after a move the counter left is
// read again at least: every instance whose exchanges succeed has
// switched within two. After them it is read again as long as a reading
// finds something taken there (an instance whose exchange fails decides
// on it until one succeeds), for at most the key's time in the fleet's
// set after the move.
const settleRounds = 2

// hotSettle is a move of this instance's (at, on its clock), with the
// last reading of the counter the key left and the rounds to go.
type hotSettle struct {
	hotMove
	at   time.Time
	read counterReads
	left int
}

// counterReads is a reading of a counter (the key's own, or its shards):
// the questions (cost 0) asked of each Redis key and their answers. A
// Decision does not tell what a counter regains by a later instant
// against the clock its decisions use, so a reading keeps more: for a
// sliding_window_log, the units each log took since the previous reading
// (since, redisstore.Store.LoggedSince, asked before the question); for
// every other algorithm, its state (sts, redisstore.Store.CounterState,
// read after the question, and its answer computed from it); and the
// instant (µs, on the clock the key's decisions use) each was read at.
type counterReads struct {
	reqs   []sluice.Request
	ds     []sluice.Decision
	clocks []int64
	sts    []sluice.State
	since  []int64
}

// readCounters asks reqs (questions: cost 0) of Redis (s) itself.
func readCounters(ctx context.Context, s *redisstore.Store, reqs []sluice.Request) (counterReads, error) {
	rs, errs := readCountersAfter(ctx, s, [][]sluice.Request{reqs}, []counterReads{{}})
	return rs[0], errs[0]
}

// readCountersAfter is readCounters of each reqs[i] after prevs[i], an
// earlier reading of the same (a log's since counts from its instant) or
// none, all together: Redis is asked once for all of them
// (redisstore.Store.ReadCounters), in the round trips one reading takes.
func readCountersAfter(ctx context.Context, s *redisstore.Store, reqs [][]sluice.Request, prevs []counterReads) ([]counterReads, []error) {
	rds := make([]redisstore.Reading, len(reqs))
	for i := range reqs {
		rds[i].Requests, rds[i].After = reqs[i], prevs[i].clocks
	}
	s.ReadCounters(ctx, rds)
	rs, errs := make([]counterReads, len(reqs)), make([]error, len(reqs))
	for j, rd := range rds {
		r := counterReads{reqs: reqs[j], ds: rd.Decisions, clocks: rd.Clocks, sts: rd.States, since: rd.Units}
		err := rd.Err
		for i, q := range r.reqs {
			if err == nil && q.Algorithm != sluice.SlidingWindowLog {
				// Its answer, from the state read after the question: both
				// of one instant.
				st := r.sts[i].Clone()
				_, err = q.Algorithm.TakeMicro(&r.ds[i], &st, &q.Limit, r.clocks[i], 0)
			}
		}
		rs[j], errs[j] = r, err
	}
	return rs, errs
}

// used returns what the counters had used together: each one's capacity
// less its Remaining.
func (r counterReads) used() int64 {
	var n int64
	for i, q := range r.reqs {
		n += max(0, q.Algorithm.Capacity(q.Limit)-r.ds[i].Remaining)
	}
	return n
}

// takenBy returns what the counters took between r and later, a reading
// of the same (readCountersAfter r): for each, what it would hold had it
// taken nothing, less what it holds. From a counter's state, what it
// holds at the second reading's instant (sluice.Algorithm.RemainingAt),
// exact, on the counter's own clock; a log counts what it took itself.
func (r counterReads) takenBy(later counterReads) int64 {
	var n int64
	for i, q := range r.reqs {
		if q.Algorithm == sluice.SlidingWindowLog {
			n += later.since[i]
			continue
		}
		n += max(0, q.Algorithm.RemainingAt(r.sts[i], q.Limit, time.UnixMicro(later.clocks[i]))-later.ds[i].Remaining)
	}
	return n
}

// fleetTTL is how long a key of summary rule stays in the fleet's set
// after it was last found hot (0 for a rule not shared).
func (d *Daemon) fleetTTL(rule string) time.Duration {
	if auto := d.hotAuto.Load(); auto != nil {
		return (*auto)[rule]
	}
	return 0
}

// takeSettles returns the moves to settle, leaving none.
func (d *Daemon) takeSettles() []hotSettle {
	d.settleMu.Lock()
	defer d.settleMu.Unlock()
	xs := d.settles
	d.settles = nil
	return xs
}

func (d *Daemon) addSettle(x hotSettle) {
	d.settleMu.Lock()
	defer d.settleMu.Unlock()
	d.settles = append(d.settles, x)
}

// settle reads again the counters the earlier moves xs left (but those
// that moved again in ms), all together, and charges what they gained to
// where the keys went, together too (chargeAll), each move's charge
// failing alone.
func (d *Daemon) settle(ctx context.Context, gen *generation, s *redisstore.Store, xs []hotSettle, ms []hotMove, now time.Time, n int) {
	var (
		todo  []hotSettle
		reqs  []sluice.Request // todo's own requests
		reads [][]sluice.Request
		prevs []counterReads
	)
	for _, x := range xs {
		if slices.ContainsFunc(ms, func(m hotMove) bool { return m.rule == x.rule && m.key == x.key }) {
			continue
		}
		// hotRequest first: Set.Rule makes a summary for a rule gone.
		req, ok := hotRequest(gen, x.rule, x.key)
		if !ok || d.hot.Rule(x.rule).IsHot(x.key) != x.hot {
			continue
		}
		req.Now = now
		rs := slices.Clone(x.read.reqs)
		for i := range rs {
			rs[i].Now = now
		}
		todo, reqs, reads, prevs = append(todo, x), append(reqs, req), append(reads, rs), append(prevs, x.read)
	}
	if len(todo) == 0 {
		return
	}
	laters, errs := readCountersAfter(ctx, s, reads, prevs)
	// The charges of the moves read, together (chargeAll).
	cs := make([]hotCharge, len(todo))
	for i, x := range todo {
		if errs[i] == nil {
			cs[i] = hotCharge{req: reqs[i], cost: x.read.takenBy(laters[i]), shards: x.hot}
		}
	}
	for i, err := range chargeAll(ctx, gen.eng.Store(), s, cs, n) {
		if err != nil {
			errs[i] = err
		}
	}
	for i, x := range todo {
		later, err, taken := laters[i], errs[i], cs[i].cost
		if err != nil {
			d.log.Debug("hot keys: settling a key's move", "rule", x.rule, "key", x.key, "to shards", x.hot, "err", err)
			continue
		}
		x.read = later
		if x.left--; x.left > 0 || taken > 0 && now.Sub(x.at) < d.fleetTTL(x.rule) {
			d.addSettle(x)
		}
	}
}
