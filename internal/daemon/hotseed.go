package daemon

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/descriptors"
	"github.com/sluicehq/sluice/internal/hotkeys"
	"github.com/sluicehq/sluice/redisstore"
)

// Seeding a key's counters when shards: auto moves it
//
// A key that turns hot moves from its own counter to its shards; left
// empty, the shards would admit their whole limit on top of what the key
// had used in the window: up to one extra limit. Coming back, its own key
// (at rest: it stays on its shards until then) would do the same on top
// of what the shards had counted. So the instance whose exchange adds the
// key to the fleet's set (one call of one instance: shareHot) charges its
// shards with what its own key has used, split as the limit is, and the
// one whose exchange drops it charges its own key with what the shards
// have used together. "Used" is the counter's capacity less the Remaining
// of a question of cost 0, which counts nothing; the charge is a forced
// one (a report's), of what the counter moved to lacks of that (the
// shards together): it is brought up to what the key used, not
// charged it on top of what it holds. A counter moved to is at rest but
// when the key comes back before it is: a key dropped by the set's bound
// (maxFleetHot) while in use, or hot again within a horizon of leaving its
// shards. Charged on top, both counters then held what the key used
// twice (40 used of 60, and both read full: TestAutoShardsBoundDropChargedOnce).
// What the seeding instance decides on the counter it moved to between
// its switch (the exchange) and the seed's questions, milliseconds, counts
// toward what the key used. The questions are asked of Redis itself:
// the engine's store sends a lease rule's to the instance's lease, which
// answers from the units it holds (a sync rule's, from its local count),
// not from what the fleet used. The charge runs through the engine's
// store, as the key's decisions do (a lease gives back what it holds of
// the key first). Units that instances hold unspent are counted used:
// the seed errs toward admitting less.
//
// What it cannot make exact: the question and the charge are two calls on
// other Cluster slots than the decisions', and the other instances switch
// at their own refresh, up to HotKeysRefresh (and an exchange) later. What
// those admit on the old counter after the question is carried at the
// moving instance's next refreshes (hotsettle.go), refill and all; not
// what an instance later still admits there after a reading that found
// nothing taken. A
// key's used units are charged at the move's instant: a sliding log's or
// a sliding window counter's then count from it rather than from when they
// were admitted, so for up to a period the key may admit less (by at most
// what it had used). A debt past the limit is not carried (Remaining stops
// at 0), and a failed seed (Redis away, or seeds past seedTimeout) leaves
// the move as unseeded: up to one extra limit.

// seedTimeout bounds the seeds of one refresh together: a refresh waits
// for them, and the next one is due HotKeysRefresh later.
const seedTimeout = HotKeysRefresh / 2

// hotMove is a key of a rule (by summary name: a rule's name, or a
// descriptor's "envoy/DOMAIN/PATH") that joined the fleet's set at this
// instance's exchange (hot: onto its shards) or left it (back to its own
// key).
type hotMove struct {
	rule, key string
	hot       bool
}

// appendMoves adds the moves of one exchange of rule's set: the keys it
// added and those it dropped, a key in both (dropped as expired, added
// back by this instance) moving nowhere.
func appendMoves(ms []hotMove, rule string, added, gone []string) []hotMove {
	for _, k := range added {
		if !slices.Contains(gone, k) {
			ms = append(ms, hotMove{rule: rule, key: k, hot: true})
		}
	}
	for _, k := range gone {
		if !slices.Contains(added, k) {
			ms = append(ms, hotMove{rule: rule, key: k})
		}
	}
	return ms
}

// seed seeds the counters of the keys moved (see above) and settles the
// earlier moves (hotsettle.go), at now. Nothing is sharded while the daemon
// decides in memory, so nothing is seeded then (nor settled).
func (d *Daemon) seed(s *redisstore.Store, ms []hotMove, now time.Time) {
	earlier := d.takeSettles()
	if len(ms) == 0 && len(earlier) == 0 {
		return
	}
	n := s.Masters()
	if n < 2 || d.fallback != nil && d.fallback.Mode() == fleet.ModeLocal {
		return
	}
	gen := d.cur.Load()
	limit := seedTimeout
	if d.opts.seedTimeout > 0 {
		limit = d.opts.seedTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	d.seedMoves(ctx, gen, s, ms, now, n)
	// After the seeds, which matter more within seedTimeout.
	d.settle(ctx, gen, s, earlier, ms, now, n)
}

// seedMoves charges the counter each of ms moves to (through the engine's
// store) with what it lacks of what the counter it leaves has used, both
// read in Redis (s), and notes the moves to settle. The readings of the
// counters left go together, then those of the counters moved to (for the
// keys that had used any), as the settle's do (redisstore.Store.ReadCounters),
// then the charges (chargeAll).
func (d *Daemon) seedMoves(ctx context.Context, gen *generation, s *redisstore.Store, ms []hotMove, now time.Time, n int) {
	var (
		todo      []hotMove
		reqs      []sluice.Request   // todo's own requests
		from, dst [][]sluice.Request // the counters each leaves and goes to
	)
	for _, m := range ms {
		req, ok := hotRequest(gen, m.rule, m.key)
		if !ok {
			continue
		}
		req.Now = now
		own, shards := []sluice.Request{req}, s.Shards(req, n)
		if !m.hot {
			own, shards = shards, own
		}
		todo, reqs, from, dst = append(todo, m), append(reqs, req), append(from, own), append(dst, shards)
	}
	if len(todo) == 0 {
		return
	}
	lefts, errs := readCountersAfter(ctx, s, from, make([]counterReads, len(from)))
	var used []int // the moves whose counter left had used any
	for i := range todo {
		if errs[i] == nil && lefts[i].used() > 0 {
			used = append(used, i)
		}
	}
	var tos []counterReads
	var toErrs []error
	if len(used) > 0 {
		reads := make([][]sluice.Request, len(used))
		for j, i := range used {
			reads[j] = dst[i]
		}
		tos, toErrs = readCountersAfter(ctx, s, reads, make([]counterReads, len(used)))
	}
	// The charges of the moves read, together (chargeAll).
	cs := make([]hotCharge, len(used))
	for j, i := range used {
		if errs[i] = toErrs[j]; errs[i] == nil {
			cs[j] = hotCharge{req: reqs[i], cost: lefts[i].used() - tos[j].used(), shards: todo[i].hot}
		}
	}
	for j, err := range chargeAll(ctx, gen.eng.Store(), s, cs, n) {
		if err != nil {
			errs[used[j]] = err
		}
	}
	for i, m := range todo {
		if err := errs[i]; err != nil {
			d.log.Debug("hot keys: seeding a key's counters", "rule", m.rule, "key", m.key, "to shards", m.hot, "err", err)
			continue
		}
		d.addSettle(hotSettle{hotMove: m, at: now, read: lefts[i], left: settleRounds})
	}
}

// hotRequest is the request of key, as the fleet's set holds it (its
// bytes, hotkeys.Key.Raw), of summary rule in gen: a rule's key is the
// store key, a descriptor's lacks its head. A key longer than the summary
// keeps (its text: its first bytes, "…" and a digest) cannot be rebuilt,
// nor can one of a rule gone or no longer shards: auto.
func hotRequest(gen *generation, rule, key string) (sluice.Request, bool) {
	if len(key) > hotkeys.DefaultMaxKeyBytes {
		return sluice.Request{}, false
	}
	if r := gen.rules.Rule(rule); r != nil {
		return sluice.Request{Key: key, Algorithm: r.Algorithm, Limit: r.Limit}, r.Shards.Auto
	}
	var req sluice.Request
	found := false
	gen.descs.Each(func(r *descriptors.Rule) {
		if !found && r.Shards.Auto && r.FullName() == rule {
			req, found = sluice.Request{Key: r.Head() + key, Algorithm: r.Algorithm, Limit: r.Limit}, true
		}
	})
	return req, found
}

// maxCharges bounds the charges of one refresh's seeds, or settles, in
// flight at once.
const maxCharges = 64

// hotCharge is one move's charge: cost, to req's shards (shards) or its
// own key.
type hotCharge struct {
	req    sluice.Request
	cost   int64
	shards bool
}

// chargeAll runs the charges cs through st together, up to maxCharges at
// once, and returns each one's error: one failing leaves the others be.
// They are independent (each is a forced charge of its own key, which
// adds its cost whatever the order; a key charged twice is charged both
// times, as one after the other), so they go out together and the client
// sends the calls waiting for a node in one write (rueidis pipelines
// concurrent calls): fewer round trips than a charge's each, one after
// another. The workers start together, to line their calls up. A charge
// not started when ctx is done fails with its error; chargeAll returns
// once every charge started has.
func chargeAll(ctx context.Context, st sluice.Store, s *redisstore.Store, cs []hotCharge, n int) []error {
	errs := make([]error, len(cs))
	var todo []int // the charges of a cost
	for i := range cs {
		if cs[i].cost > 0 {
			todo = append(todo, i)
		}
	}
	var next atomic.Int64
	work := func() {
		for {
			j := int(next.Add(1)) - 1
			if j >= len(todo) {
				return
			}
			i := todo[j]
			c := &cs[i]
			switch {
			case ctx.Err() != nil:
				errs[i] = ctx.Err()
			case c.shards:
				errs[i] = chargeShards(ctx, st, s, c.req, c.cost, n)
			default:
				errs[i] = chargeKey(ctx, st, c.req, c.cost)
			}
		}
	}
	if len(todo) <= 1 {
		work()
		return errs
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range min(len(todo), maxCharges) {
		wg.Go(func() {
			<-start
			work()
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// chargeShards charges req's n shards (through st) with cost, split as the
// limit is.
func chargeShards(ctx context.Context, st sluice.Store, s *redisstore.Store, req sluice.Request, cost int64, n int) error {
	if cost <= 0 {
		return nil
	}
	req.Cost, req.Force = cost, true
	parts := s.Spread(req, n)
	if len(parts) == 0 || parts[0].Namespace == req.Namespace {
		return nil // not sharded: nothing moved
	}
	return st.TakeAll(ctx, parts, make([]sluice.Decision, len(parts)))
}

// chargeKey charges req's own key (through st) with cost.
func chargeKey(ctx context.Context, st sluice.Store, req sluice.Request, cost int64) error {
	if cost <= 0 {
		return nil
	}
	req.Cost, req.Force = cost, true
	_, err := st.Take(ctx, req)
	return err
}
