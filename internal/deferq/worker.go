package deferq

import (
	"context"
	_ "embed"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/ctxtime"
)

//go:embed begin.lua
var beginLua string

//go:embed finish.lua
var finishLua string

//go:embed keep.lua
var keepLua string

//go:embed prune.lua
var pruneLua string

//go:embed malformed.lua
var malformedLua string

//go:embed read.lua
var readLua string

// forgetLua is put before the scripts that forget requests gone (read.lua,
// sweep.lua).
//
//go:embed forget.lua
var forgetLua string

//go:embed sweep.lua
var sweepLua string

//go:embed release.lua
var releaseLua string

var (
	beginScript     = rueidis.NewLuaScript(beginLua)
	finishScript    = rueidis.NewLuaScript(finishLua)
	keepScript      = rueidis.NewLuaScript(keepLua)
	pruneScript     = rueidis.NewLuaScript(pruneLua)
	malformedScript = rueidis.NewLuaScript(malformedLua)
	readScript      = rueidis.NewLuaScript(forgetLua + readLua)
	releaseScript   = rueidis.NewLuaScript(releaseLua)
	sweepScript     = rueidis.NewLuaScript(forgetLua + sweepLua)
)

// maxDeadLetters bounds the dead-letter stream of a rule, below its
// MaxQueue: a dead letter is a whole request, so Redis holds at most twice
// the queue's bound per rule.
const maxDeadLetters = 100_000

// deadLetters is how many dead letters the rule keeps (the oldest go).
func (w *worker) deadLetters() string {
	return strconv.Itoa(min(w.rule.Load().maxQueue(), maxDeadLetters))
}

// worker replays one rule's queue from this instance.
type worker struct {
	q    *Queue
	rule atomic.Pointer[Rule]
	name string
	// consumer names this worker in the rule's group: Options.Consumer,
	// with -N after it for the N-th worker of the rule since (Queue.started).
	consumer string
	tag      string // Tag(name): every id of the rule starts with it
	base     string // the rule's key prefix, through "}:"
	// recordsEvery is the least time between two steps of the pass over
	// the rule's records (records.lua), by any instance.
	recordsEvery time.Duration

	quit     chan struct{}
	quitOnce sync.Once

	in   chan []*entry
	done chan result
	room chan struct{}
	// kick wakes the reader out of its idle poll: this instance has just
	// queued a request of the rule (Enqueue).
	kick chan struct{}
	held atomic.Int64 // entries held (read, not yet settled or lost), and places reserved (held.go)
	// heldBytes is their size (entry.size; a place reserved at the
	// largest), bounded by MaxHeldBytes.
	heldBytes atomic.Int64
	// admit serialises what adds to held and heldBytes (reserve).
	admit sync.Mutex
}

// entry is one queued request this instance holds.
type entry struct {
	sid, id, key        string
	also                []string // the request's other keys of the rule (Enqueue's keys[1:])
	method, uri, header string
	body                string
	notBefore           time.Time
	busy                bool
	// unheld: e gave its place to the entry it claimed and was let go for
	// (reserveFor); it no longer counts as held.
	unheld bool
	// unrecorded is an outcome the upstream produced but Redis did not
	// take yet: recorded on the next turn instead of sending again.
	unrecorded *outcome
}

// size is what e holds in memory, near enough: its strings.
func (e *entry) size() int64 {
	n := len(e.sid) + len(e.id) + len(e.key) + len(e.method) + len(e.uri) + len(e.header) + len(e.body)
	for _, k := range e.also {
		n += len(k)
	}
	return int64(n)
}

type outcome struct {
	send   string // the send's token: finish.lua records its outcome once
	state  string // delivered or failed
	status int
	err    string
	retry  time.Duration // upstream's Retry-After, if any
}

// result is what one turn of an entry ended with.
type result struct {
	e     *entry
	drop  bool          // settled or lost: forget it
	after time.Duration // otherwise: try again after this long
}

func newWorker(q *Queue, r *Rule, consumer string) *worker {
	w := &worker{
		q:        q,
		name:     r.Name,
		consumer: consumer,
		tag:      Tag(r.Name),
		base:     q.base(Tag(r.Name)),
		quit:     make(chan struct{}),
		in:       make(chan []*entry),
		done:     make(chan result),
		room:     make(chan struct{}, 1),
		kick:     make(chan struct{}, 1),

		recordsEvery: q.o.claimEvery(),
	}
	w.rule.Store(r)
	return w
}

func (w *worker) stop() { w.quitOnce.Do(func() { close(w.quit) }) }

func (w *worker) run(parent context.Context) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	go func() {
		select {
		case <-w.quit:
			cancel()
		case <-ctx.Done():
		}
	}()
	var c rueidis.Client
	for {
		if c = w.q.o.Connect(); c == nil {
			if ctxtime.Sleep(ctx, time.Second) != nil {
				return
			}
			continue
		}
		err := c.Do(ctx, c.B().XgroupCreate().Key(w.base+"q").Group(group).Id("0").Mkstream().Build()).Error()
		if err == nil || strings.Contains(err.Error(), "BUSYGROUP") {
			break
		}
		w.q.o.Logger.Warn("defer: create consumer group", "rule", w.name, "err", err)
		if ctxtime.Sleep(ctx, time.Second) != nil {
			return
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() { w.read(ctx) })
	w.dispatch(ctx)
	wg.Wait()
	w.release(parent, c)
}

// release lets go of the entries this instance holds, once its turns in
// flight have recorded their outcome (release.lua): another instance takes
// them at its next claim round. Bounded by a second; if Redis does not
// answer, they are claimed after ClaimIdle, as a dead instance's are.
func (w *worker) release(parent context.Context, c rueidis.Client) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), time.Second)
	defer cancel()
	idle := strconv.FormatInt(w.q.o.ClaimIdle.Milliseconds(), 10)
	n, err := releaseScript.Exec(ctx, c, []string{w.base + "q"}, []string{group, w.consumer, idle}).AsInt64()
	if err != nil {
		w.q.o.Logger.Warn("defer: let go of the requests held at shutdown (others claim them after claim_idle)", "rule", w.name, "err", err)
		return
	}
	w.q.o.Logger.Debug("defer: released", "rule", w.name, "requests", n)
	if n > 0 {
		w.q.o.Logger.Info("defer: requests held let go at shutdown, for another instance to send", "rule", w.name, "requests", n)
	}
}

// dispatch owns the held entries: it starts a turn for the oldest entry of
// every key when it is due, at most Concurrency at once, and keeps the held
// entries claimed.
func (w *worker) dispatch(ctx context.Context) {
	h := newHolding(w)
	inflight := 0
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	heartbeat := time.NewTicker(w.q.o.ClaimIdle / 3)
	defer heartbeat.Stop()
	for {
		// Start what is due; arm the timer for the next due head.
		now := time.Now()
		next := time.Time{}
		for _, l := range h.byKey {
			e := l[0]
			if e.busy {
				continue
			}
			if !e.notBefore.After(now) && inflight < w.q.o.Concurrency {
				e.busy = true
				inflight++
				go func() { w.done <- w.turn(ctx, e) }()
				continue
			}
			if next.IsZero() || e.notBefore.Before(next) {
				next = e.notBefore
			}
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = max(time.Until(next), time.Millisecond)
		}
		timer.Reset(wait)
		select {
		case es := <-w.in:
			h.add(es)
		case r := <-w.done:
			inflight--
			h.ended(r.e, r.drop)
			if !r.drop {
				r.e.notBefore = time.Now().Add(r.after)
			}
		case <-timer.C:
		case <-heartbeat.C:
			w.keepClaimed(ctx, h.bySID)
		case <-ctx.Done():
			for inflight > 0 { // let turns in flight record their outcome
				r := <-w.done
				r.e.busy = false
				inflight--
			}
			// Outcomes Redis did not take yet, waiting for their turn to
			// record them again: recorded now, or the release lets their
			// requests go, and another instance sends them again. Asked
			// again until Redis takes them (a connection the outage broke
			// fails the first ask after it), 5 s in all.
			deadline := time.Now().Add(5 * time.Second)
			for _, e := range h.bySID {
				for e.unrecorded != nil && time.Now().Before(deadline) {
					if w.turn(ctx, e); e.unrecorded != nil {
						time.Sleep(100 * time.Millisecond)
					}
				}
			}
			return
		}
	}
}

// keepClaimed claims the held entries again for this instance, restarting
// their idle time, so that no other instance takes them while they wait
// for the rate or a retry. Only those still pending with this instance:
// one another instance claimed while this one was silent is its now.
func (w *worker) keepClaimed(ctx context.Context, bySID map[string]*entry) {
	if len(bySID) == 0 {
		return
	}
	c := w.q.o.Connect()
	ids := make([]string, 0, len(bySID))
	for sid := range bySID {
		ids = append(ids, sid)
	}
	for len(ids) > 0 {
		n := min(len(ids), 100)
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		err := keepScript.Exec(ctx, c, []string{w.base + "q"}, append([]string{group, w.consumer}, ids[:n]...)).Error()
		cancel()
		if err != nil && ctx.Err() == nil {
			w.q.o.Logger.Warn("defer: keep entries claimed", "rule", w.name, "err", err)
		}
		ids = ids[n:]
	}
}

// insertOrdered inserts e into l, kept in stream order: entries claimed in
// several rounds (a dead instance's head entry was claimed last, its idle
// time having been reset last) must still go out in the order queued.
func insertOrdered(l []*entry, e *entry) []*entry {
	i := len(l)
	for i > 0 && sidLess(e.sid, l[i-1].sid) {
		i--
	}
	l = append(l, nil)
	copy(l[i+1:], l[i:])
	l[i] = e
	return l
}

// sidLess compares stream entry ids "ms-seq" numerically.
func sidLess(a, b string) bool {
	am, as, _ := strings.Cut(a, "-")
	bm, bs, _ := strings.Cut(b, "-")
	if len(am) != len(bm) {
		return len(am) < len(bm)
	}
	if am != bm {
		return am < bm
	}
	if len(as) != len(bs) {
		return len(as) < len(bs)
	}
	return as < bs
}
