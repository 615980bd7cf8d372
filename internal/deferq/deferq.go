// Package deferq is the deferral queue of action: defer: a request over
// its rule's limit is written to a Redis Stream instead of being refused,
// answered 202 with an id, and replayed to the upstream later, at the
// rule's rate, by a worker in every `sluice serve` that shares the Redis.
//
// # Redis layout
//
// Everything of one rule sits under one Cluster hash tag, so each step is
// one atomic script on one node:
//
//	sluice:defer:{T}:q          the stream of queued requests (consumer group "sluice")
//	sluice:defer:{T}:dead       the dead-letter stream
//	sluice:defer:{T}:s:ID       a hash: where request ID stands (state, upstream status, attempts)
//	sluice:defer:{T}:k:H        a list: the IDs queued for one limiter key, in order
//	sluice:defer:{T}:r:R        a list: the entries one read returned (read.lua), until the next
//	sluice:defer:{T}:i          a hash: the stream entry id of each request not settled -> its ID
//	sluice:defer:{T}:scan       how far the scan for requests an earlier version queued went, and where it ends (scan.lua; 7 days from its last step)
//	sluice:defer:{T}:records    where the pass over the rule's records goes on (records.lua: a SCAN cursor; 7 days from its last step)
//
// where T is a digest of the rule's name (so a reload that changes the
// rule's rate keeps its queue) and H a digest of the limiter key. The id
// handed to the client, T-R with R random, names the rule's tag, so
// GET /v1/deferred/ID finds its hash without knowing the rule.
//
// # Delivery
//
// Each instance is one consumer of the rule's group. It reads new entries
// (XREADGROUP) while it holds fewer than MaxHeld and their bytes fit in
// Options.MaxHeldBytes, claims entries left pending by a dead instance once they
// have been idle for ClaimIdle (XAUTOCLAIM) within the same bound, both
// in read.lua, which leaves
// in Redis the body of an entry over the rule's MaxBodyBytes in force (a
// reload lowered it since the entry was queued): such an entry is
// dead-lettered unsent, and a read is bounded by the bound in force. It
// keeps the entries it holds
// alive by claiming them again for itself every ClaimIdle/3 (so a live but
// patient instance is never robbed), those still pending with it only (one
// another instance claimed while this one was silent stays with that one).
// An entry a claim finds trimmed from the stream (XAUTOCLAIM drops it
// from the group) is a request nothing will send: the same script finds
// its record by the stream-id index and deletes it with its place in its
// key's list, unasked; each claim round also sweeps a slice of the index
// for requests gone that no claim meets (trimmed before anyone read
// them) (forget.lua, sweep.lua). Requests queued by an earlier version,
// which has no index, are indexed by a scan of the stream the instances
// make once between them, a slice each claim round, up to the entry that
// was the stream's last when it began (scan.lua). Such a
// request trimmed before the scan reached it, or queued by an instance of
// the earlier version after it, and trimmed before its turn, is in
// neither: each claim round also passes over a slice of the rule's
// records (SCAN, records.lua), and one that says its request waits while
// its entry is neither in the stream nor pending goes.
// A held entry is sent when it is the oldest of its key (the key's list:
// order per key holds across the fleet), its owner is still this instance,
// its next attempt is due if one failed (whichever instance recorded it),
// and the rule's limit admits it on its keys, all at once (the counters live traffic
// uses, so the upstream never sees more than the rate). The outcome is
// recorded in one script: the state (delivered with the upstream's status,
// failed and waiting to be retried, or dead-lettered), XACK and XDEL, all
// at once.
//
// An upstream answer below 500 other than 429 is final (delivered, with
// that status); 429, 5xx and transport errors are retried with exponential
// back-off (honouring Retry-After) up to MaxAttempts, then the request goes
// to the dead-letter stream. The attempts are counted in Redis and the
// back-off follows that count, whichever instances made them.
//
// # Exactly once
//
// Enqueueing is idempotent by id: when the reply to the enqueue is lost,
// Enqueue runs it again under the same id and answers from that reply, so
// a request is never answered refused (and sent again by its client) while
// it sits queued; if Redis does not answer that either, Enqueue returns an
// *OutcomeUnknownError naming the id it is queued under, if it is. Status
// answering ErrUnknownID for that id settles it: it leaves a mark that an
// enqueue still on its way finds when it lands, and then queues nothing.
//
// Every replayed request carries Idempotency-Key: ID (unless the client
// sent its own) and Sluice-Deferred-Id: ID. Once an outcome is recorded no
// instance sends the request again. Two windows are left, where the
// request is sent again with the same Idempotency-Key, which an idempotent
// upstream recognises: an instance that dies after the upstream answered
// and before the outcome script ran (another claims the request), and an
// attempt retried after the upstream may have acted on it (no answer
// within DeliveryTimeout, a connection lost mid-request, a 5xx sent after
// the work was done). A delivery is
// bounded by DeliveryTimeout, which must stay under ClaimIdle/2, so a live
// instance always records its outcome before anyone may claim the entry.
package deferq

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/logthrottle"
)

// Defaults of the zero Options and Rule fields.
const (
	DefaultPrefix          = "sluice:defer:"
	DefaultClaimIdle       = 30 * time.Second
	DefaultDeliveryTimeout = 10 * time.Second
	DefaultMaxAttempts     = 10 // 1+2+4+8+16+32+60+60+60 = 243 s of back-off: an upstream restart dead-letters nothing
	DefaultBackoff         = time.Second
	DefaultMaxBackoff      = time.Minute
	DefaultConcurrency     = 16
	DefaultStatusTTL       = 24 * time.Hour
	DefaultEnqueueTimeout  = 2 * time.Second
	DefaultMaxQueue        = 10_000
	DefaultMaxBodyBytes    = 1 << 20
	// MaxHeld bounds the entries one instance holds per rule at once.
	MaxHeld = 1000
	// DefaultMaxHeldBytes bounds the memory those entries take, per rule.
	DefaultMaxHeldBytes = 64 << 20
	// MaxHeadBytes bounds what a queued request holds besides its body:
	// its target, its headers (as queued: JSON), its limiter keys and its
	// ids, together, the daemon's own header limit (net/http's 1 MiB), so
	// that an entry not yet read is bounded: Enqueue refuses a larger one
	// with ErrHeadTooLarge.
	MaxHeadBytes = 1 << 20
	// maxStreamID is the longest stream entry id: two 64-bit decimals
	// and a '-'.
	maxStreamID = 20 + 1 + 20
	// DefaultMaxBufferedBytes bounds the request bodies read for
	// deferral at once.
	DefaultMaxBufferedBytes = 256 << 20

	group = "sluice"

	// queuedTTL is how long the record of a request still queued lasts
	// after it was queued or last tried (each turn keeps it).
	queuedTTL = 7 * 24 * time.Hour
)

// Errors callers tell apart.
var (
	// ErrQueueFull: the rule's queue holds MaxQueue requests.
	ErrQueueFull = errors.New("deferq: queue full")
	// ErrBodyTooLarge: the request body exceeds the rule's MaxBodyBytes.
	ErrBodyTooLarge = errors.New("deferq: body too large")
	// ErrHeadTooLarge: the request's target, headers and keys, as queued,
	// exceed MaxHeadBytes.
	ErrHeadTooLarge = errors.New("deferq: headers too large")
	// ErrUnknownID: no deferred request has this id (or its record expired).
	ErrUnknownID = errors.New("deferq: unknown deferred id")
	// ErrBadID: the string is not a deferred id at all.
	ErrBadID = errors.New("deferq: malformed deferred id")
	// ErrBusy: the bodies being read for deferral at once already take
	// Options.MaxBufferedBytes.
	ErrBusy = errors.New("deferq: too many request bodies being queued at once")
	// ErrUnknownRule: Enqueue for a rule the Queue was not given.
	ErrUnknownRule = errors.New("deferq: no such defer rule")
)

// Options configure a Queue. Client or Connect is required.
type Options struct {
	// Client is the Redis (or Redis Cluster) connection.
	Client rueidis.Client
	// Connect, instead of Client, returns the connection, or nil while
	// there is none yet (a daemon started before Redis answered): calls
	// then fail with sluice.ErrStoreUnavailable and workers wait.
	Connect func() rueidis.Client
	// Prefix starts every Redis key; default DefaultPrefix. No braces.
	Prefix string
	// Upstream is where replayed requests go, as the proxy's upstream;
	// SetUpstream changes it. Without one, nothing is replayed.
	Upstream *url.URL
	// Transport sends replayed requests; default a new http.Transport.
	Transport http.RoundTripper
	// Consumer names this instance in the consumer groups; default
	// hostname-pid-random (unique per process: never reuse a dead
	// instance's name, or its pending entries look alive). A rule's
	// worker started again (a reload removed the rule and brought it
	// back) is named Consumer-N.
	Consumer string
	// ClaimIdle is how long an entry pending with a silent instance waits
	// before another claims it; default 30s. Claim rounds come every
	// quarter of it, at most 5 s apart (claimEvery): an entry is claimed
	// within ClaimIdle and one round of going idle, if there is room.
	ClaimIdle time.Duration
	// DeliveryTimeout bounds one replay (until the response headers);
	// default 10s; must be under ClaimIdle/2.
	DeliveryTimeout time.Duration
	// MaxAttempts bounds the sends of one request; default 10 (with the
	// default back-off, the last comes 243 s after the first failed one).
	MaxAttempts int
	// Backoff is the wait after the first failed attempt, doubling each
	// time up to MaxBackoff; defaults 1s and 1m.
	Backoff, MaxBackoff time.Duration
	// Concurrency bounds the deliveries in flight per rule; default 16.
	Concurrency int
	// MaxHeldBytes bounds the bytes of the requests (bodies, headers,
	// targets) one instance reads or claims into memory per rule while it
	// holds others; default DefaultMaxHeldBytes. An entry not yet read
	// counts as the rule's MaxBodyBytes plus MaxHeadBytes, so at most
	// MaxHeldBytes/(MaxBodyBytes+MaxHeadBytes) are read or claimed at once
	// (at least one while none is held); the rest wait in Redis, new ones
	// unread, a silent instance's pending with it.
	MaxHeldBytes int64
	// MaxBufferedBytes bounds the bytes of the request bodies ReadBody
	// holds at once, read or being read, over all rules: a body whose
	// length is not known counts at its rule's cap while it is read;
	// default DefaultMaxBufferedBytes. One body is always let through.
	MaxBufferedBytes int64
	// StatusTTL is how long an outcome can be read after it is recorded;
	// default 24h.
	StatusTTL time.Duration
	// EnqueueTimeout bounds each of Enqueue's asks to Redis (at most two:
	// the second when the first's reply is lost); default 2s. A Redis
	// that takes the request and does not answer then costs the client
	// at most twice this, and an answer saying the outcome is unknown.
	// It bounds ServeHTTP's read of a status too (then 503).
	EnqueueTimeout time.Duration
	// Registerer receives the metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Logger receives delivery failures and the Redis errors of
	// GET /v1/deferred/ID; nil discards.
	Logger *slog.Logger
	// Now is this instance's clock: a request's queued_at and the log's
	// throttle (an outcome's time and its next attempt are Redis's, so
	// that the instances' clocks need not agree); nil means time.Now.
	Now func() time.Time
}

func (o *Options) defaults() error {
	if o.Client == nil && o.Connect == nil {
		return errors.New("deferq: nil Options.Client and Options.Connect")
	}
	if o.Client != nil {
		c := o.Client
		o.Connect = func() rueidis.Client { return c }
	}
	if o.Upstream != nil && (o.Upstream.Scheme == "" || o.Upstream.Host == "") {
		return errors.New("deferq: Options.Upstream must be an absolute URL")
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if strings.ContainsAny(o.Prefix, "{}") {
		return fmt.Errorf("deferq: prefix %q must not contain braces", o.Prefix)
	}
	if o.Transport == nil {
		o.Transport = &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second}
	}
	if o.Consumer == "" {
		host, _ := os.Hostname()
		o.Consumer = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), randHex(4))
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.ClaimIdle, DefaultClaimIdle)
	def(&o.DeliveryTimeout, DefaultDeliveryTimeout)
	def(&o.Backoff, DefaultBackoff)
	def(&o.MaxBackoff, DefaultMaxBackoff)
	def(&o.StatusTTL, DefaultStatusTTL)
	def(&o.EnqueueTimeout, DefaultEnqueueTimeout)
	if o.DeliveryTimeout >= o.ClaimIdle/2 {
		return fmt.Errorf("deferq: delivery timeout %v must be under half the claim idle time %v", o.DeliveryTimeout, o.ClaimIdle)
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.MaxHeldBytes <= 0 {
		o.MaxHeldBytes = DefaultMaxHeldBytes
	}
	if o.MaxBufferedBytes <= 0 {
		o.MaxBufferedBytes = DefaultMaxBufferedBytes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return nil
}

// Rule is one rule whose action is defer.
type Rule struct {
	Name string
	// MaxQueue bounds the requests queued for the rule; default 10,000.
	MaxQueue int
	// MaxBodyBytes bounds a queued request's body; default 1 MiB.
	MaxBodyBytes int64
	// Take asks the rule's limit whether a replay may go now on every key
	// of keys (the request's keys of the rule, the one it is queued under
	// first), all or none, and counts it on each if so: the rate of
	// replay. When it may not, the Decision's RetryAfter is the longest
	// wait among the keys that refused.
	Take func(ctx context.Context, keys []string) (sluice.Decision, error)
}

func (r Rule) maxQueue() int {
	if r.MaxQueue <= 0 {
		return DefaultMaxQueue
	}
	return r.MaxQueue
}

// MaxBody returns the rule's body cap, defaulted.
func (r Rule) MaxBody() int64 {
	if r.MaxBodyBytes <= 0 {
		return DefaultMaxBodyBytes
	}
	return r.MaxBodyBytes
}

// Queue is the deferral queue of a daemon: enqueue, status, and the
// replay workers of every defer rule. Safe for concurrent use.
type Queue struct {
	o        Options
	m        *metrics
	upstream atomic.Pointer[url.URL]

	mu      sync.Mutex
	rules   map[string]*Rule
	workers map[string]*worker
	// started counts the workers started per rule: a rule a reload
	// removed and brought back gets a consumer name of its own
	// (Consumer-N), so that the old worker, finishing its sends, lets go
	// of its own entries only, not the new one's (a send in flight among
	// them, which another instance would then claim and send again).
	started map[string]int
	runCtx  context.Context
	wg      sync.WaitGroup

	statusLog logThrottle          // GET /v1/deferred/ID's Redis errors
	lostLog   logthrottle.Throttle // enqueues whose reply was lost
	deadLog   logthrottle.Throttle // requests dead-lettered

	buffered atomic.Int64 // bytes of the bodies ReadBody holds (MaxBufferedBytes)
}

// New returns a Queue; Run starts its workers.
func New(o Options) (*Queue, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	q := &Queue{o: o, rules: map[string]*Rule{}, workers: map[string]*worker{}, started: map[string]int{}}
	q.upstream.Store(o.Upstream)
	q.m = newMetrics(q, o.Registerer)
	return q, nil
}

// SetUpstream changes where replayed requests go (on a reload).
func (q *Queue) SetUpstream(u *url.URL) { q.upstream.Store(u) }

// SetRules replaces the defer rules (on start and on every reload). Workers
// of rules that disappeared stop (their queues stay in Redis for when they
// come back); new ones start if Run is running.
func (q *Queue) SetRules(rs []Rule) {
	q.mu.Lock()
	defer q.mu.Unlock()
	next := make(map[string]*Rule, len(rs))
	for i := range rs {
		r := rs[i]
		next[r.Name] = &r
	}
	for name := range q.rules {
		if _, ok := next[name]; !ok {
			go q.warnStranded(name)
		}
	}
	q.rules = next
	for name, w := range q.workers {
		if r, ok := next[name]; ok {
			w.rule.Store(r)
			continue
		}
		w.stop()
		delete(q.workers, name)
	}
	if q.runCtx != nil {
		q.startLocked()
	}
}

// warnStranded logs what a defer rule removed (renamed, its action
// changed) leaves queued: those requests wait in Redis, unsent and out of
// the metrics, until a defer rule of that name comes back.
func (q *Queue) warnStranded(rule string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n, age, err := q.Depth(ctx, rule)
	if err != nil || n == 0 {
		return
	}
	q.o.Logger.Warn("defer: rule removed with requests queued: they wait in Redis, unsent, until a defer rule of this name comes back",
		"rule", rule, "requests", n, "oldest_age", age.Round(time.Second))
}

func (q *Queue) startLocked() {
	for name, r := range q.rules {
		if _, ok := q.workers[name]; ok {
			continue
		}
		consumer := q.o.Consumer
		if n := q.started[name]; n > 0 {
			consumer += "-" + strconv.Itoa(n)
		}
		q.started[name]++
		w := newWorker(q, r, consumer)
		q.workers[name] = w
		q.wg.Go(func() { w.run(q.runCtx) })
	}
}

// Run runs the replay workers until ctx ends, then waits for deliveries in
// flight to be recorded, and closes the transport's idle connections to
// the upstream.
func (q *Queue) Run(ctx context.Context) error {
	q.mu.Lock()
	q.runCtx = ctx
	q.startLocked()
	q.mu.Unlock()
	<-ctx.Done()
	q.wg.Wait()
	if t, ok := q.o.Transport.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
	return nil
}

// keys of a rule (its tag T) and of one request.
func (q *Queue) base(tag string) string { return q.o.Prefix + "{" + tag + "}:" }

// Tag returns the digest of a rule name that names its Redis keys and
// starts its ids.
func Tag(rule string) string {
	h := sha256.Sum256([]byte(rule))
	return hex.EncodeToString(h[:6])
}

func keyDigest(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:10])
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// parseID checks id's form (12 hex, '-', 20 hex) and returns its tag.
func parseID(id string) (string, error) {
	tag, r, ok := strings.Cut(id, "-")
	if !ok || len(tag) != 12 || len(r) != 20 || !isHex(tag) || !isHex(r) {
		show := id
		if len(show) > 40 {
			show = show[:40] + "…"
		}
		return "", fmt.Errorf("%w: %q (want 12 hex digits, '-', 20 hex digits)", ErrBadID, show)
	}
	return tag, nil
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Rule returns the defer rule named name, or nil.
func (q *Queue) Rule(name string) *Rule {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.rules[name]
}

var errNotConnected = fmt.Errorf("deferq: not connected to Redis yet: %w", sluice.ErrStoreUnavailable)
