package deferq

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/ctxtime"
)

// The reader of a rule's queue on this instance: it claims the entries of
// instances gone, reads new ones within what the instance may hold, and
// hands them to the dispatcher (worker.go).

// read feeds the dispatcher: stale entries claimed from dead instances,
// then new entries, while there is room for them (capacity).
func (w *worker) read(ctx context.Context) {
	w.readLoop(ctx, w.steps(ctx, w.q.o.Connect())) // run waited for the connection
}

// steps are the reader's asks of Redis c, while ctx lasts.
func (w *worker) steps(ctx context.Context, c rueidis.Client) readSteps {
	q := w.base + "q"
	me := w.consumer
	idle := strconv.FormatInt(w.q.o.ClaimIdle.Milliseconds(), 10)
	bound := func() string { return strconv.FormatInt(w.rule.Load().MaxBody(), 10) }
	// cursor is where the scan of the pending list for entries to claim
	// goes on: XAUTOCLAIM looks at ten times its COUNT entries per call
	// (COUNT the room left, at most 100), so a round of calls covers
	// 10,000 (in at most 100 calls: fewer while the room left is under 10
	// entries), and the next round takes up where it stopped, so that
	// every pending entry is looked at, however many live instances hold
	// before a dead one's.
	cursor := "0-0"
	// record is the key of the last read's record (readEntries), which
	// the next read deletes: its reply came.
	var record string
	// index is where the sweep of the stream-id index goes on (sweep): a
	// slice of it each claim round.
	index := "0"
	// scanned: the fleet's scan for requests an earlier version queued
	// is over (scanOld).
	scanned := false
	return readSteps{
		prune: func() { w.prune(ctx, c) },
		// Bounded by capacity, as new entries are: several silent
		// instances may have left as much as each held. The rest stay
		// pending for a later round, here or elsewhere. A held entry
		// waiting for an older one of its key that a silent instance
		// holds claims that one itself (claimHead).
		claim: func() bool {
			if !scanned {
				scanned = w.scanOld(ctx, c)
			}
			index = w.sweep(ctx, c, index)
			w.passRecords(ctx, c)
			for looked, calls := int64(0), 0; looked < 10_000 && calls < 100; calls++ {
				g := w.reserve(100)
				if g.n < 1 {
					break // the cursor stays: the next round goes on from it
				}
				looked += 10 * g.n
				next, es, err := w.readEntries(ctx, c, []string{group, me, "claim", strconv.FormatInt(g.n, 10), bound(), idle, cursor}, &record)
				if err != nil {
					w.giveBack(&g)
					if ctx.Err() == nil {
						w.q.o.Logger.Warn("defer: xautoclaim", "rule", w.name, "err", err)
					}
					cursor = "0-0"
					break
				}
				if len(es) > 0 {
					w.q.m.claimed(w.name, len(es))
				}
				if !w.send(ctx, es, &g) {
					return false
				}
				if cursor = next; cursor == "0-0" || cursor == "" {
					cursor = "0-0" // the whole list looked at: the next round starts again
					break
				}
			}
			return true
		},
		fresh: func() (int, bool, error) {
			g := w.reserve(100)
			if g.n < 1 {
				return 0, false, nil
			}
			_, es, err := w.readEntries(ctx, c, []string{group, me, "new", strconv.FormatInt(g.n, 10), bound(), idle, ""}, &record)
			if err != nil {
				w.giveBack(&g)
				if ctx.Err() == nil && strings.Contains(err.Error(), "NOGROUP") {
					c.Do(ctx, c.B().XgroupCreate().Key(q).Group(group).Id("0").Mkstream().Build())
				}
				return 0, true, err
			}
			if len(es) == 0 {
				w.giveBack(&g)
				return 0, true, nil
			}
			if !w.send(ctx, es, &g) {
				return 0, true, ctx.Err()
			}
			return len(es), true, nil
		},
	}
}

// readSteps are the reader's asks of Redis; readLoop says when it makes
// them.
type readSteps struct {
	// prune deletes the consumers of instances gone.
	prune func()
	// claim runs one claim round; false when ctx ended while it handed
	// entries over.
	claim func() bool
	// fresh reads new entries within the room left: how many it read,
	// false if there was no room to read any, and the read's error.
	fresh func() (n int, room bool, err error)
}

// claimEvery is how often the reader's claim rounds come: a quarter of
// ClaimIdle, at most maxClaimEvery. An entry idle for ClaimIdle is
// claimed by the first round that starts after (if the instance has
// room for it), and a round starts at most claimEvery after the last
// one started, plus the time one read of new entries takes (the
// reader's waits end when a round is due): so within ClaimIdle plus
// one claimEvery plus one read (TestClaimRoundsKeepTime).
func (o *Options) claimEvery() time.Duration { return min(o.ClaimIdle/4, maxClaimEvery) }

// maxClaimEvery bounds the time between claim rounds, whatever ClaimIdle.
const maxClaimEvery = 5 * time.Second

// readLoop makes the reader's asks (s) until ctx ends: a prune every
// ClaimIdle, a claim round every claimEvery (the first at once), and
// reads of new entries in between. New entries are read by read.lua,
// which cannot block (a script never does): an empty read waits before
// the next, 100 ms at first, twice as long after each empty read up to a
// second (the blocking read's bound before), so that an idle rule costs
// each instance about one read a second; a request this instance queues
// wakes it at once. No wait, after an empty read, a failed one, or for
// room, outlasts the next claim round's time.
func (w *worker) readLoop(ctx context.Context, s readSteps) {
	every := w.q.o.claimEvery()
	minPoll := min(100*time.Millisecond, every)
	maxPoll := min(time.Second, every)
	poll := minPoll
	var lastPrune time.Time
	nextClaim := time.Now()
	for ctx.Err() == nil {
		if time.Since(lastPrune) >= w.q.o.ClaimIdle {
			lastPrune = time.Now()
			s.prune()
		}
		if now := time.Now(); !now.Before(nextClaim) {
			nextClaim = now.Add(every)
			if !s.claim() {
				return
			}
		}
		// untilClaim caps each wait: never past the next round.
		untilClaim := func(d time.Duration) time.Duration { return max(min(d, time.Until(nextClaim)), 0) }
		n, room, err := s.fresh()
		switch {
		case ctx.Err() != nil:
			return
		case !room:
			t := time.NewTimer(untilClaim(time.Second))
			select {
			case <-w.room:
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
		case err != nil:
			w.q.o.Logger.Warn("defer: xreadgroup", "rule", w.name, "err", err)
			ctxtime.Sleep(ctx, untilClaim(time.Second))
		case n == 0:
			w.idle(ctx, untilClaim(poll))
			poll = min(2*poll, maxPoll)
		default:
			poll = minPoll
		}
	}
}

// claimHead is e's turn when an older request of its key, entry sid, is
// held by another consumer silent for ClaimIdle (begin.lua): e waits for
// it, and sid is claimed here (if still idle that long, as a claim round
// asks), or e could wait for ever on an instance whose bound its held
// entries fill. If there is no room for sid (counted at its largest), e
// is let go in the same script (as at shutdown: it was not sent) for a
// later claim, here or elsewhere, and sid takes its place; if sid does
// not fit even there (the others held fill the bound), e is let go
// alone, and sid waits for a claim round with room.
func (w *worker) claimHead(ctx context.Context, e *entry, sid string) result {
	wait := result{e: e, after: 250 * time.Millisecond}
	c := w.q.o.Connect()
	idle := strconv.FormatInt(w.q.o.ClaimIdle.Milliseconds(), 10)
	args := []string{group, w.consumer, "one", "1", strconv.FormatInt(w.rule.Load().MaxBody(), 10), idle, sid}
	g := w.reserve(1)
	swap := g.n == 0
	if swap {
		if g = w.reserveFor(e); g.n == 0 {
			return w.letGo(ctx, e, idle)
		}
		args = append(args, e.sid)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, es, _ := w.readEntries(rctx, c, args, nil)
	cancel()
	if len(es) == 0 { // its holder is alive, or it is gone (or Redis did not answer)
		w.restore(e, &g)
		w.giveBack(&g)
		return wait
	}
	w.q.m.claimed(w.name, len(es))
	if !w.send(ctx, es, &g) || !swap {
		return wait
	}
	w.q.o.Logger.Debug("defer: let go to stay within the bound", "rule", w.name, "id", e.id)
	return result{e: e, drop: true}
}

// readEntries runs read.lua (args: its ARGV) under a token of its own.
// If its reply is lost (an error that is not Redis's answer: the
// connection cut, perhaps after Redis ran it), it asks again under the
// same token, for up to ClaimIdle/2 while ctx lasts: read.lua then returns
// the entries it read the first time, if it ran, rather than leave them
// pending with this instance and held by nobody until ClaimIdle (and a
// claimed head, its key's later requests waiting behind it). With
// record (the reader's reads, one after another), the record of the read
// before is deleted, and *record becomes this one's (if it may exist);
// else the record expires after ClaimIdle.
func (w *worker) readEntries(ctx context.Context, c rueidis.Client, args []string, record *string) (string, []rueidis.XRangeEntry, error) {
	keys := []string{w.base + "q", w.base + "i", w.base + "r:" + randHex(8)}
	if record != nil && *record != "" {
		keys = append(keys, *record)
	}
	deadline := time.Now().Add(w.q.o.ClaimIdle / 2)
	wait := 50 * time.Millisecond
	for {
		arr, err := readScript.Exec(ctx, c, keys, args).ToArray()
		if err == nil {
			if record != nil {
				*record = ""
			}
			if len(arr) != 2 {
				return "", nil, fmt.Errorf("read.lua: %d values, want 2", len(arr))
			}
			cursor, _ := arr[0].ToString()
			es, err := arr[1].AsXRange()
			if record != nil && len(es) > 0 {
				*record = keys[2]
			}
			return cursor, es, err
		}
		if _, ok := rueidis.IsRedisErr(err); ok || ctx.Err() != nil || time.Now().Add(wait).After(deadline) {
			if record != nil && !ok {
				*record = keys[2] // it may have run
			}
			return "", nil, err
		}
		if ctxtime.Sleep(ctx, wait) != nil {
			return "", nil, err
		}
		wait = min(2*wait, time.Second)
	}
}

// letGo lets go of e, held (release.lua), to make room within the bound,
// for a later claim here or elsewhere. A reply lost on its way back (the
// connection cut after Redis ran the script) is asked again, for up to
// 5 s while ctx lasts: release.lua lets go of e only while e is pending
// with this instance, so running it twice does no more than once. Kept
// held instead, e was let go in Redis (idle for ClaimIdle, free for any
// instance's claim round) while this instance still counted it against
// its bound and turned it.
func (w *worker) letGo(ctx context.Context, e *entry, idle string) result {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := askAgain(rctx, func() error {
		return releaseScript.Exec(rctx, w.q.o.Connect(), []string{w.base + "q"}, []string{group, w.consumer, idle, e.sid}).Error()
	})
	if err != nil {
		return result{e: e, after: 250 * time.Millisecond}
	}
	w.q.o.Logger.Debug("defer: let go to stay within the bound", "rule", w.name, "id", e.id)
	return result{e: e, drop: true}
}

// askAgain runs do, and again while it fails otherwise than by Redis's
// answer (the reply lost: the connection cut, perhaps after Redis ran
// it) and ctx lasts, waiting 50 ms, then twice as long each time up to a
// second. For scripts that may run twice. It returns do's last error.
func askAgain(ctx context.Context, do func() error) error {
	wait := 50 * time.Millisecond
	for {
		err := do()
		if _, redisErr := rueidis.IsRedisErr(err); err == nil || redisErr || ctx.Err() != nil {
			return err
		}
		if ctxtime.Sleep(ctx, wait) != nil {
			return err
		}
		wait = min(2*wait, time.Second)
	}
}

// idle waits d after an empty read, or less if this instance queues a
// request of the rule meanwhile (kick); false when ctx ends.
func (w *worker) idle(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-w.kick:
	case <-ctx.Done():
		return false
	}
	return true
}

// wake tells the reader that a request of the rule was queued here.
func (w *worker) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// prune deletes the rule's consumers left by instances gone (prune.lua):
// those holding nothing, idle for two ClaimIdle (a live instance reads
// at least every claim round, at most ClaimIdle/4).
func (w *worker) prune(ctx context.Context, c rueidis.Client) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	bound := strconv.FormatInt(2*w.q.o.ClaimIdle.Milliseconds(), 10)
	if err := pruneScript.Exec(ctx, c, []string{w.base + "q"}, []string{group, w.consumer, bound}).Error(); err != nil && ctx.Err() == nil {
		w.q.o.Logger.Warn("defer: prune consumers", "rule", w.name, "err", err)
	}
}

// sweep forgets the requests gone that no claim will meet (sweep.lua),
// looking at the slice of the stream-id index from cursor, and returns
// where the next sweep goes on: about 100 entries a claim round, so
// that the whole index (at most the rule's MaxQueue requests, and those
// settled or dropped by instances of an earlier version) is looked at
// within MaxQueue/100 rounds.
func (w *worker) sweep(ctx context.Context, c rueidis.Client, cursor string) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	next, err := sweepScript.Exec(ctx, c, []string{w.base + "q", w.base + "i"}, []string{group, cursor, "100"}).ToString()
	if err != nil {
		if ctx.Err() == nil {
			w.q.o.Logger.Warn("defer: sweep the stream-id index", "rule", w.name, "err", err)
		}
		return cursor
	}
	return next
}

// send hands the entries read to the dispatcher, each in one of the
// places g reserved for them, at its size; the places left are given
// back. An entry that is not a queued request of the rule is
// dead-lettered instead (malformed).
func (w *worker) send(ctx context.Context, es []rueidis.XRangeEntry, g *grant) bool {
	defer w.giveBack(g)
	batch := make([]*entry, 0, len(es))
	for _, x := range es {
		f := x.FieldValues
		if tag, err := parseID(f["id"]); err != nil || tag != w.tag {
			w.malformed(ctx, x.ID, f, "")
			continue
		}
		e := &entry{sid: x.ID, id: f["id"], key: f["key"], method: f["method"], uri: f["uri"], header: f["header"], body: f["body"]}
		if a := f["also"]; a != "" {
			if err := json.Unmarshal([]byte(a), &e.also); err != nil {
				w.malformed(ctx, x.ID, f, fmt.Sprintf("malformed entry: keys %s: %v", quoteShort(a, 64), err))
				continue
			}
		}
		if over := f["over"]; over != "" {
			// read.lua left its body in Redis: over the bound in force.
			n, _ := strconv.ParseInt(over, 10, 64)
			w.overBound(ctx, e, n)
			continue
		}
		w.take(g, e)
		batch = append(batch, e)
	}
	if len(batch) == 0 {
		return true
	}
	select {
	case w.in <- batch:
		return true
	case <-ctx.Done():
		for _, e := range batch {
			w.hold(e, -1)
		}
		return false
	}
}
