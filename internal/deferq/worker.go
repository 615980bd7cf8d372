package deferq

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
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

//go:embed release.lua
var releaseLua string

var (
	beginScript     = rueidis.NewLuaScript(beginLua)
	finishScript    = rueidis.NewLuaScript(finishLua)
	keepScript      = rueidis.NewLuaScript(keepLua)
	pruneScript     = rueidis.NewLuaScript(pruneLua)
	malformedScript = rueidis.NewLuaScript(malformedLua)
	readScript      = rueidis.NewLuaScript(readLua)
	releaseScript   = rueidis.NewLuaScript(releaseLua)
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
	tag  string // Tag(name): every id of the rule starts with it
	base string // the rule's key prefix, through "}:"

	quit     chan struct{}
	quitOnce sync.Once

	in   chan []*entry
	done chan result
	room chan struct{}
	// kick wakes the reader out of its idle poll: this instance has just
	// queued a request of the rule (Enqueue).
	kick chan struct{}
	held atomic.Int64 // entries held (read, not yet settled or lost)
	// heldBytes is their size (entry.size), bounded by MaxHeldBytes.
	heldBytes atomic.Int64
}

// entry is one queued request this instance holds.
type entry struct {
	sid, id, key        string
	also                []string // the request's other keys of the rule (Enqueue's keys[1:])
	method, uri, header string
	body                string
	notBefore           time.Time
	busy                bool
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

func newWorker(q *Queue, r *Rule) *worker {
	w := &worker{
		q:    q,
		name: r.Name,
		tag:  Tag(r.Name),
		base: q.base(Tag(r.Name)),
		quit: make(chan struct{}),
		in:   make(chan []*entry),
		done: make(chan result),
		room: make(chan struct{}, 1),
		kick: make(chan struct{}, 1),
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
	n, err := releaseScript.Exec(ctx, c, []string{w.base + "q"}, []string{group, w.q.o.Consumer, idle}).AsInt64()
	if err != nil {
		w.q.o.Logger.Warn("defer: let go of the requests held at shutdown (others claim them after claim_idle)", "rule", w.name, "err", err)
		return
	}
	if n > 0 {
		w.q.o.Logger.Info("defer: requests held let go at shutdown, for another instance to send", "rule", w.name, "requests", n)
	}
}

// read feeds the dispatcher: stale entries claimed from dead instances,
// then new entries, while there is room for them (capacity).
func (w *worker) read(ctx context.Context) {
	c := w.q.o.Connect() // run waited for it
	q := w.base + "q"
	me := w.q.o.Consumer
	idle := strconv.FormatInt(w.q.o.ClaimIdle.Milliseconds(), 10)
	// New entries are read by read.lua, which cannot block (a script
	// never does): an empty read waits before the next, 100 ms at first,
	// twice as long after each empty read up to a second (the blocking
	// read's bound before), so that an idle rule costs each instance about
	// one read a second; a request this instance queues wakes it at once.
	minPoll := min(100*time.Millisecond, w.q.o.ClaimIdle/4)
	maxPoll := min(time.Second, w.q.o.ClaimIdle/4)
	poll := minPoll
	bound := func() string { return strconv.FormatInt(w.rule.Load().MaxBody(), 10) }
	var lastClaim, lastPrune time.Time
	// cursor is where the scan of the pending list for entries to claim
	// goes on: XAUTOCLAIM looks at ten times its COUNT entries per call,
	// so a round of 10 calls covers 10,000, and the next round takes up
	// where it stopped, so that every pending entry is looked at, however
	// many live instances hold before a dead one's.
	cursor := "0-0"
	for ctx.Err() == nil {
		if time.Since(lastPrune) >= w.q.o.ClaimIdle {
			lastPrune = time.Now()
			w.prune(ctx, c)
		}
		if time.Since(lastClaim) >= w.q.o.ClaimIdle/4 {
			lastClaim = time.Now()
			// Not bounded by capacity: a held entry may wait for an
			// older one of its key that only a claim brings back, and
			// what a silent instance left pending is at most what it
			// held, within its own bound.
			for range 10 { // at most 1000 entries claimed, 10,000 looked at, per round
				arr, err := readScript.Exec(ctx, c, []string{q}, []string{group, me, "claim", "100", bound(), idle, cursor}).ToArray()
				if err != nil || len(arr) < 2 {
					if err != nil && ctx.Err() == nil {
						w.q.o.Logger.Warn("defer: xautoclaim", "rule", w.name, "err", err)
					}
					cursor = "0-0"
					break
				}
				es, _ := arr[1].AsXRange()
				if len(es) > 0 {
					w.q.m.claimed(w.name, len(es))
					if !w.send(ctx, es) {
						return
					}
				}
				if cursor, _ = arr[0].ToString(); cursor == "0-0" || cursor == "" {
					cursor = "0-0" // the whole list looked at: the next round starts again
					break
				}
			}
		}
		n := w.capacity()
		if n < 1 {
			select {
			case <-w.room:
			case <-time.After(time.Second):
			case <-ctx.Done():
				return
			}
			continue
		}
		arr, err := readScript.Exec(ctx, c, []string{q}, []string{group, me, "new", strconv.FormatInt(n, 10), bound()}).ToArray()
		var es []rueidis.XRangeEntry
		if err == nil && len(arr) == 2 {
			es, err = arr[1].AsXRange()
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if strings.Contains(err.Error(), "NOGROUP") {
				c.Do(ctx, c.B().XgroupCreate().Key(q).Group(group).Id("0").Mkstream().Build())
			}
			w.q.o.Logger.Warn("defer: xreadgroup", "rule", w.name, "err", err)
			if ctxtime.Sleep(ctx, time.Second) != nil {
				return
			}
			continue
		}
		if len(es) == 0 {
			if !w.idle(ctx, poll) {
				return
			}
			poll = min(2*poll, maxPoll)
			continue
		}
		poll = minPoll
		if !w.send(ctx, es) {
			return
		}
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
// at least every ClaimIdle/4).
func (w *worker) prune(ctx context.Context, c rueidis.Client) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	bound := strconv.FormatInt(2*w.q.o.ClaimIdle.Milliseconds(), 10)
	if err := pruneScript.Exec(ctx, c, []string{w.base + "q"}, []string{group, w.q.o.Consumer, bound}).Error(); err != nil && ctx.Err() == nil {
		w.q.o.Logger.Warn("defer: prune consumers", "rule", w.name, "err", err)
	}
}

// capacity is how many more new entries this instance may read for the
// rule now, at most 100: fewer than MaxHeld held in all, and their bytes under
// MaxHeldBytes, each entry not yet read counted at the rule's largest
// body (its size is not known before it is read). At least one while
// none is held, so that a rule whose bodies may be larger than
// MaxHeldBytes still moves, one at a time.
func (w *worker) capacity() int64 {
	held := w.held.Load()
	n := min(100, MaxHeld-held, (w.q.o.MaxHeldBytes-w.heldBytes.Load())/max(1, w.rule.Load().MaxBody()))
	if held == 0 {
		n = max(n, 1)
	}
	return n
}

// send hands the entries read to the dispatcher, counted as held from
// now, so that the next capacity sees them. An entry that is not a queued
// request of the rule is dead-lettered instead (malformed).
func (w *worker) send(ctx context.Context, es []rueidis.XRangeEntry) bool {
	batch := make([]*entry, 0, len(es))
	for _, x := range es {
		f := x.FieldValues
		if tag, err := parseID(f["id"]); err != nil || tag != w.tag {
			w.malformed(ctx, x.ID, f["id"], "")
			continue
		}
		e := &entry{sid: x.ID, id: f["id"], key: f["key"], method: f["method"], uri: f["uri"], header: f["header"], body: f["body"]}
		if a := f["also"]; a != "" {
			if err := json.Unmarshal([]byte(a), &e.also); err != nil {
				w.malformed(ctx, x.ID, f["id"], fmt.Sprintf("malformed entry: keys %q: %v", a, err))
				continue
			}
		}
		if over := f["over"]; over != "" {
			// read.lua left its body in Redis: over the bound in force.
			n, _ := strconv.ParseInt(over, 10, 64)
			w.overBound(ctx, e, n)
			continue
		}
		w.hold(e, 1)
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

// hold counts e as held (d = 1) or no longer (d = -1); then there is room
// for the reader.
func (w *worker) hold(e *entry, d int64) {
	w.held.Add(d)
	w.heldBytes.Add(d * e.size())
	if d < 0 {
		select {
		case w.room <- struct{}{}:
		default:
		}
	}
}

// dispatch owns the held entries: it starts a turn for the oldest entry of
// every key when it is due, at most Concurrency at once, and keeps the held
// entries claimed.
func (w *worker) dispatch(ctx context.Context) {
	byKey := map[string][]*entry{}
	bySID := map[string]*entry{}
	inflight := 0
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	heartbeat := time.NewTicker(w.q.o.ClaimIdle / 3)
	defer heartbeat.Stop()
	remove := func(e *entry) {
		delete(bySID, e.sid)
		l := byKey[e.key]
		for i, x := range l {
			if x == e {
				l = append(l[:i], l[i+1:]...)
				break
			}
		}
		if len(l) == 0 {
			delete(byKey, e.key)
		} else {
			byKey[e.key] = l
		}
		w.hold(e, -1)
	}
	for {
		// Start what is due; arm the timer for the next due head.
		now := time.Now()
		next := time.Time{}
		for _, l := range byKey {
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
			for _, e := range es {
				if _, ok := bySID[e.sid]; ok {
					w.hold(e, -1) // held already
					continue
				}
				bySID[e.sid] = e
				byKey[e.key] = insertOrdered(byKey[e.key], e)
			}
		case r := <-w.done:
			inflight--
			r.e.busy = false
			if r.drop {
				remove(r.e)
			} else {
				r.e.notBefore = time.Now().Add(r.after)
			}
		case <-timer.C:
		case <-heartbeat.C:
			w.keepClaimed(ctx, bySID)
		case <-ctx.Done():
			for inflight > 0 { // let turns in flight record their outcome
				<-w.done
				inflight--
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
		err := keepScript.Exec(ctx, c, []string{w.base + "q"}, append([]string{group, w.q.o.Consumer}, ids[:n]...)).Error()
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
