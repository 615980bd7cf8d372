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
// it taken nothing, refilled meanwhile (sluice.Algorithm.RemainingAfter).
// Read as "used" alone (capacity less Remaining), a counter that refilled
// hid as much of what the late instances took: in a steady overload, all of it (the counter is
// out at every reading), a second or two of the rate admitted twice.
//
// What RemainingAfter cannot tell is not carried: what a sliding window regains
// (the answer tells when it is full again, not when each unit leaves); nor
// what the late instances take after the last round (an instance whose
// exchange fails decides on the counter left until one succeeds: at most
// its limit in a window, as unsharded). A steady late switch costs
// nothing but for the sliding windows. Nothing is
// settled for a key that moved again, or that this instance no longer
// holds where the move put it.

// settleRounds is how many refreshes after a move the counter left is
// read again: every instance has switched within two.
const settleRounds = 2

// hotSettle is a move of this instance's, with the last reading of the
// counter the key left and the rounds to go.
type hotSettle struct {
	hotMove
	read counterReads
	left int
}

// counterReads is a reading of a counter (the key's own, or its shards):
// the questions (cost 0) asked of each Redis key and their answers, and
// when they were sent and answered, on this instance's monotonic clock.
type counterReads struct {
	reqs      []sluice.Request
	ds        []sluice.Decision
	sent, got time.Time
}

// readCounters asks reqs (questions: cost 0) of Redis (s) itself.
func readCounters(ctx context.Context, s *redisstore.Store, reqs []sluice.Request) (counterReads, error) {
	r := counterReads{reqs: reqs, ds: make([]sluice.Decision, len(reqs)), sent: time.Now()}
	var err error
	if len(reqs) > 0 {
		err = s.TakeAll(ctx, reqs, r.ds)
	}
	r.got = time.Now()
	return r, err
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
// of the same: for each, what it would hold had it taken nothing
// (sluice.Algorithm.RemainingAfter), less what it holds.
func (r counterReads) takenBy(later counterReads) int64 {
	dt := later.sent.Sub(r.got) // Redis's clock moved at least that much
	var n int64
	for i, q := range r.reqs {
		n += max(0, q.Algorithm.RemainingAfter(r.ds[i], q.Limit, dt)-later.ds[i].Remaining)
	}
	return n
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
// that moved again in ms) and charges what they gained to where the keys
// went.
func (d *Daemon) settle(ctx context.Context, gen *generation, s *redisstore.Store, xs []hotSettle, ms []hotMove, now time.Time, n int) {
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
		reqs := slices.Clone(x.read.reqs)
		for i := range reqs {
			reqs[i].Now = now
		}
		later, err := readCounters(ctx, s, reqs)
		if err == nil {
			if taken := x.read.takenBy(later); x.hot {
				err = chargeShards(ctx, gen.eng.Store(), s, req, taken, n)
			} else {
				err = chargeKey(ctx, gen.eng.Store(), req, taken)
			}
		}
		if err != nil {
			d.log.Debug("hot keys: settling a key's move", "rule", x.rule, "key", x.key, "to shards", x.hot, "err", err)
			continue
		}
		x.read = later
		if x.left--; x.left > 0 {
			d.addSettle(x)
		}
	}
}
