package deferq

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/hop"
)

// dropHop removes what neither is queued nor replayed: the hop-by-hop
// headers, which are the client's connection's, as the proxy drops them
// (hop.Drop: HTTP2-Settings with them, so that no upgrade to HTTP/2 is
// passed on; Upgrade goes whole, since a replay has no client connection to
// hand over), and Content-Length, set again on replay.
func dropHop(h http.Header) {
	hop.Drop(h)
	delete(h, "Content-Length")
}

// ReadBody reads r's body for deferral under rule's cap: ErrBodyTooLarge
// past it; ErrBusy when the bodies being read and queued at once would take
// more than Options.MaxBufferedBytes (a body of unknown length counted at
// the cap until it is read). The body is consumed unless ErrBusy. Call
// release when the body is no longer needed (once Enqueue returned); it is
// a no-op after an error.
func (q *Queue) ReadBody(r *http.Request, rule *Rule) (body []byte, release func(), err error) {
	release = func() {}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, release, nil
	}
	limit := rule.MaxBody()
	if r.ContentLength > limit {
		return nil, release, fmt.Errorf("%w: %d bytes, over the cap of %d bytes", ErrBodyTooLarge, r.ContentLength, limit)
	}
	held := limit // what the body may take: its length if known, else the cap
	if r.ContentLength >= 0 {
		held = r.ContentLength
	}
	if !q.reserve(held) {
		q.m.enqueued(rule.Name, "busy")
		return nil, release, fmt.Errorf("%w (%d bytes)", ErrBusy, q.o.MaxBufferedBytes)
	}
	var once sync.Once
	free := func() { once.Do(func() { q.buffered.Add(-held) }) }
	b, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		free()
		return nil, release, fmt.Errorf("deferq: read body: %w", err)
	}
	if int64(len(b)) > limit {
		free()
		return nil, release, fmt.Errorf("%w: over the cap of %d bytes", ErrBodyTooLarge, limit)
	}
	q.buffered.Add(int64(len(b)) - held) // what it took
	held = int64(len(b))
	return b, free, nil
}

// reserve counts n more bytes of bodies held for deferral, if they fit
// under MaxBufferedBytes or nothing is held.
func (q *Queue) reserve(n int64) bool {
	for {
		cur := q.buffered.Load()
		if cur > 0 && cur+n > q.o.MaxBufferedBytes {
			return false
		}
		if q.buffered.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

//go:embed enqueue.lua
var enqueueLua string

var enqueueScript = rueidis.NewLuaScript(enqueueLua)

// Enqueue queues r (whose body, already read within the cap, is body) for
// rule under limiter key keys[0], with header as it should reach the
// upstream (the caller adds X-Forwarded-*). keys holds every key the rule
// counts the request under (a key part sent with several values), the
// one it is queued under first: its replay waits for its turn among the
// requests of keys[0] (order per key) and goes when the rule's limit
// admits it on all of keys (Rule.Take). It returns the deferred id, or
// ErrQueueFull, ErrHeadTooLarge, or an *OutcomeUnknownError.
//
// A reply lost after the script was sent (a timeout, a reset) leaves the
// request queued or not: Enqueue then runs the script again with the same
// id, which queues it at most once (enqueue.lua is idempotent by id), and
// answers from that second reply. Only when Redis does not answer that
// either does the outcome stay unknown. The asks are not cut short when
// ctx is cancelled (the client left: its request may be queued all the
// same); a ctx cancelled before anything is sent returns its error, the
// request not queued.
func (q *Queue) Enqueue(ctx context.Context, rule string, keys []string, r *http.Request, header http.Header, body []byte) (string, error) {
	ru := q.Rule(rule)
	if ru == nil {
		return "", fmt.Errorf("%w: %q", ErrUnknownRule, rule)
	}
	if len(keys) == 0 {
		return "", fmt.Errorf("deferq: enqueue on rule %q: no key", rule)
	}
	key := keys[0]
	also := ""
	if len(keys) > 1 {
		b, err := json.Marshal(keys[1:])
		if err != nil {
			return "", fmt.Errorf("deferq: keys: %w", err)
		}
		also = string(b)
	}
	h := header.Clone()
	dropHop(h)
	hj, err := json.Marshal(h)
	if err != nil {
		return "", fmt.Errorf("deferq: headers: %w", err)
	}
	tag := Tag(rule)
	id := tag + "-" + randHex(10)
	// What the entry will hold besides its body (entry.size), its stream
	// id counted at its longest: the reader counts an entry not yet read
	// at MaxHeadBytes plus the body's bound.
	n := maxStreamID + len(id) + len(r.Method) + len(r.URL.RequestURI()) + len(hj)
	for _, k := range keys {
		n += len(k)
	}
	if n > MaxHeadBytes {
		return "", fmt.Errorf("%w: %d bytes of target, headers and keys, over %d", ErrHeadTooLarge, n, MaxHeadBytes)
	}
	b := q.base(tag)
	now := strconv.FormatInt(q.o.Now().UnixMilli(), 10)
	c := q.o.Connect()
	if c == nil {
		return "", errNotConnected
	}
	rkeys := []string{b + "q", b + "s:" + id, b + "k:" + keyDigest(key), b + "i"}
	args := []string{strconv.Itoa(ru.maxQueue()), id, key, r.Method, r.URL.RequestURI(), string(hj), string(body), now, rule,
		strconv.FormatInt(queuedTTL.Milliseconds(), 10), also}
	if err := ctx.Err(); err != nil {
		// The client left before anything was sent: not queued, and no
		// doubt about it.
		return "", fmt.Errorf("deferq: enqueue on rule %q: client gone, not queued: %w", rule, err)
	}
	ask := func() error { // one ask, bounded: a Redis that never answers costs EnqueueTimeout
		// Not cut short by the client leaving: once sent, the request may
		// be queued, and Enqueue must know whether it is.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), q.o.EnqueueTimeout)
		defer cancel()
		res := enqueueScript.Exec(actx, c, rkeys, args)
		if _, err := res.AsInt64(); err == nil {
			return errFound404
		}
		return res.Error()
	}
	err = ask()
	if err != nil && !rueidis.IsRedisNil(err) && err != errFound404 {
		if notSent(err) || refused(err) {
			return "", fmt.Errorf("deferq: enqueue: %w: %w", sluice.ErrStoreUnavailable, err)
		}
		// Sent, maybe run: ask again, under the same id.
		if q.lostLog.OK(q.o.Now()) { // one a second: a slow Redis loses every reply
			q.o.Logger.Warn("defer: enqueue: reply lost, asking again", "rule", rule, "id", id, "err", err, "suppressed", q.lostLog.Dropped())
		}
		if err2 := ask(); err2 == nil || rueidis.IsRedisNil(err2) || err2 == errFound404 {
			err = err2
		} else {
			q.m.enqueued(rule, "unknown")
			return "", &OutcomeUnknownError{Rule: rule, ID: id, Err: errors.Join(err, err2)}
		}
	}
	if err == errFound404 {
		// Someone read the id's status before the request was queued: it
		// was answered 404, and so the request is not queued.
		return "", fmt.Errorf("deferq: enqueue on rule %q: %s was answered unknown before it was queued: not queued", rule, id)
	}
	if err != nil {
		q.m.enqueued(rule, "full")
		return "", fmt.Errorf("%w: rule %q holds %d requests", ErrQueueFull, rule, ru.maxQueue())
	}
	q.m.enqueued(rule, "queued")
	q.mu.Lock()
	w := q.workers[rule]
	q.mu.Unlock()
	if w != nil {
		w.wake()
	}
	return id, nil
}

// errFound404 is enqueue.lua's answer when a 404 was served for the id
// before the script ran (status.lua's mark): it queued nothing.
var errFound404 = errors.New("deferq: id answered 404 before it was queued")

// notSent reports that err means the script never left: the connection to
// Redis could not even be made.
func notSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// refused reports that err is Redis's own answer to the first ask, an
// error reply (OOM at maxmemory, READONLY, LOADING, BUSY, NOPERM): the
// reply was not lost, and the script queued nothing. Redis refuses a
// script that way before it runs or at its first write (enqueue.lua's
// XADD: a script that has written nothing may still be refused for
// memory), and every error enqueue.lua can meet after its XADD needs
// its keys written over by hand with another type. Only the first ask's:
// after a lost reply, the second may be refused while the first, queued,
// is still on its way.
func refused(err error) bool {
	_, ok := rueidis.IsRedisErr(err)
	return ok
}

// OutcomeUnknownError is Enqueue's answer when it cannot tell whether the
// request was queued: Redis's reply to the enqueue was lost, and asking
// again failed too. If it was queued, it is under ID and will be replayed;
// once Redis answers, Status(ID) tells (ErrUnknownID: it was not, and never
// will be). It matches sluice.ErrStoreUnavailable.
type OutcomeUnknownError struct {
	Rule, ID string
	Err      error
}

func (e *OutcomeUnknownError) Error() string {
	return fmt.Sprintf("deferq: enqueue on rule %q: outcome unknown, queued as %s or not at all: %v", e.Rule, e.ID, e.Err)
}

func (e *OutcomeUnknownError) Unwrap() []error { return []error{sluice.ErrStoreUnavailable, e.Err} }
