package server

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// DefaultMaxCalls bounds the calls on the gRPC listener, over all its
// connections, whose request has not come whole yet. Such a call holds a
// goroutine and about 10 KB from its HEADERS frame on, and what came of
// its request, up to the message's length (grpc-go widens the call's
// flow-control window to the message it reads; at most MaxRecvMsgSize,
// 4 MiB): without a bound over all connections, a client sending HEADERS
// frames and unfinished requests could hold DefaultMaxConcurrentStreams
// calls on each of max_connections connections (~10 KB × 1,000 × 10,000,
// plus up to ConnWindow per connection: 40 GB) until the connections
// end. With it, at most ~10 MB, and the bytes of their requests, which
// MaxRequestBytesTotal bounds over all connections to 64 MiB (without
// it, 4 MiB each: ~4 GB). Past the bound a call is refused at once with
// RESOURCE_EXHAUSTED (Envoy then applies its failure_mode_deny). Envoy
// sends each request whole with its headers: its calls wait microseconds
// here, not the time of their decision.
const DefaultMaxCalls = 1000

// reapEvery is how many calls are refused, after a reap that found every
// counted call alive, before the next reap (unless the oldest call
// counted has ended): a client holding the bound full must not make each
// of its refused calls cost a pass over all.
const reapEvery = 64

// callGate counts the calls waiting for their request and refuses those
// past max. tap runs as a call's stream is made (grpc.InTapHandle) and
// lists the call; a rate limit call leaves the list when its request has
// come (arrived); a call that ended otherwise (its client reset it or went
// away; a health check or reflection call) is reaped from the list when
// the list is full, or when Calls is read. A streaming call (health Watch,
// reflection) counts while it lasts, so calls other than the rate limit
// service's may hold at most half of max: 1,000 Watch calls from one
// client (its connection carries as many), reading their statuses,
// otherwise had every rate limit call of the listener refused for as long
// as they lasted, which may be for ever.
type callGate struct {
	max     int
	refused atomic.Uint64
	mu      sync.Mutex
	list    waiting // sentinel of a ring of the calls counted
	n       int     // calls in the ring
	others  int     // of them, calls other than the rate limit service's
	skip    int     // refusals to go before the next reap
}

// rlsMethod is the rate limit service's method, as grpc-go names it.
var rlsMethod = "/" + rlsv3.RateLimitService_ServiceDesc.ServiceName + "/ShouldRateLimit"

func newCallGate(max int) *callGate {
	g := &callGate{max: max}
	g.list.prev, g.list.next = &g.list, &g.list
	return g
}

type callKey struct{}

// waiting is the context of a call the gate counts, and its place in the
// gate's ring (nil once out of it).
type waiting struct {
	context.Context
	prev, next *waiting
	other      bool // a call other than the rate limit service's
}

func (w *waiting) Value(key any) any {
	if key == (callKey{}) {
		return w
	}
	return w.Context.Value(key)
}

func errCalls(max int) error {
	return status.Error(codes.ResourceExhausted, "server: "+strconv.Itoa(max)+" calls waiting for their request, the most this listener holds")
}

func errOthers(max int) error {
	return status.Error(codes.ResourceExhausted, "server: "+strconv.Itoa(max)+" health and reflection calls, the most this listener holds")
}

// fullLocked reports whether a call (other: not the rate limit service's)
// must be refused.
func (g *callGate) fullLocked(other bool) bool {
	return g.n >= g.max || other && g.others >= g.max/2
}

// tap lists a new call, or refuses it when max are listed and alive (or,
// for a call other than the rate limit service's, max/2 such calls). ctx
// is the call's stream's own: grpc-go cancels it when the call ends.
func (g *callGate) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	w := &waiting{Context: ctx, other: info != nil && info.FullMethodName != rlsMethod}
	g.mu.Lock()
	// Reap when full, but after a futile reap only every reapEvery
	// refusals, or once the oldest call counted has ended.
	if g.fullLocked(w.other) && (g.skip == 0 || g.list.prev.Context.Err() != nil) && g.reapLocked() == 0 {
		g.skip = reapEvery
	}
	if g.fullLocked(w.other) {
		g.skip--
		g.mu.Unlock()
		g.refused.Add(1)
		if g.n < g.max {
			return nil, errOthers(g.max / 2)
		}
		return nil, errCalls(g.max)
	}
	w.prev, w.next = &g.list, g.list.next
	w.next.prev, g.list.next = w, w
	g.n++
	if w.other {
		g.others++
	}
	g.mu.Unlock()
	return w, nil
}

// unlinkLocked takes w out of the ring.
func (g *callGate) unlinkLocked(w *waiting) {
	w.prev.next, w.next.prev = w.next, w.prev
	w.prev, w.next = nil, nil
	g.n--
	if w.other {
		g.others--
	}
}

// reapLocked takes the calls that have ended out of the ring and returns
// how many.
func (g *callGate) reapLocked() int {
	n := 0
	for w := g.list.next; w != &g.list; {
		next := w.next
		if w.Context.Err() != nil {
			g.unlinkLocked(w)
			n++
		}
		w = next
	}
	return n
}

// arrived takes the call of ctx out of the count: its request has come.
// The rate limit service's handler calls it; other calls (health checks,
// reflection) stay counted until they end, and are reaped then.
func (g *callGate) arrived(ctx context.Context) {
	if w, ok := ctx.Value(callKey{}).(*waiting); ok {
		g.mu.Lock()
		if w.prev != nil {
			g.unlinkLocked(w)
		}
		g.mu.Unlock()
	}
}

// Calls returns the calls waiting for their request, and streaming calls.
func (g *GRPC) Calls() int {
	g.gate.mu.Lock()
	defer g.gate.mu.Unlock()
	g.gate.reapLocked()
	return g.gate.n
}

// CallsRefused returns how many calls were refused at MaxCalls.
func (g *GRPC) CallsRefused() uint64 { return g.gate.refused.Load() }
