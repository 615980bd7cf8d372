package server

import (
	"errors"
	"log/slog"
	"strconv"
	"sync/atomic"
)

// MaxRequestBytesTotal bounds the bytes of request DATA the gRPC listener
// holds, over all its connections, for calls whose request has not ended
// (no END_STREAM from the client, nor a reset, nor the call's end from
// the server): past it, the connections whose oldest such request began
// first are closed, at once, until the rest hold no more (requestBudget).
// Without it, a client sending unfinished requests held up to
// MaxRecvMsgSize each (grpc-go widens a call's flow-control window to the
// message it reads) on each of the DefaultMaxCalls calls waiting for
// their request: 4 GB, as much as it sent.
//
// 64 MiB, sixteen of the largest requests. Envoy sends each request whole
// as fast as its connection takes it, so that its bytes count only while
// they cross: a request of a few hundred bytes comes in one read with its
// END_STREAM and never counts. The largest Envoy sends with its default
// header bound (64 descriptors of a 60 KiB header, 3.75 MiB) counts for
// the few milliseconds it takes to come: held at once are the large
// requests on their way, each up to its size. Seventeen at once are past
// the bound; Envoy resets a rate limit call after its timeout (20 ms by
// default), which frees its bytes, so that they would take more than 850
// such requests a second (27 Gb/s), where a core decides some 170 (6 ms
// of CPU each, mostly hashing the values into their store keys).
// Measured (TestGRPCRequestBytesEnvoyLoad): eight of them sent at once,
// over and over, on two grpc-go connections, held at most 24 MiB.
const MaxRequestBytesTotal = 16 * MaxRecvMsgSize

// errRequestBytes ends a connection the requestBudget closed.
var errRequestBytes = errors.New("server: the connection whose request not yet whole began first when all connections together held more than " +
	strconv.Itoa(MaxRequestBytesTotal>>20) + " MiB of such requests")

// requestBudget bounds the bytes of requests not yet whole over all the
// connections of a listener (MaxRequestBytesTotal): each connection
// counts the DATA of its calls whose request is open (unreadConn.received)
// and tells the budget whenever its count changes, once per read at
// most, with its oldest such request's place in line (the order in which
// the requests' first bytes came, over all connections: seq); past the
// bound, the connections whose oldest request began first are closed
// until the rest are within it. Oldest first: Envoy sends a request whole,
// as fast as its connection takes it, so that its requests are never
// older than the moments they take to come, where a client holding
// unfinished requests, stalled or trickling, holds them from when they
// began; had the connections holding the most gone first, a client
// spreading its requests over many connections, each holding less than
// an Envoy connection holds while its large request comes, got Envoy's
// closed. To have it closed now, a client must send more than the bound
// in requests begun after Envoy's, within the moments it takes to come.
// Requests, not connections: an Envoy connection whose large requests
// overlap, so that it never holds none, is still as young as its oldest
// request. A connection holding none (Envoy's, between two large
// requests; any connection sending only whole small requests) is not
// listed. A connection counting more than it holds (a reflection
// stream, whose requests are read one by one as they come, counts them
// all until it ends) is old too: it is closed early, and only it.
//
// What it counts is what grpc-go holds of a request: grpc-go reads it as
// it comes into the call's message, up to the message's length, and
// frees it when the call ends. The count is made before grpc-go reads the
// frames: a connection closed for the bound is closed before what took
// the count past it reaches grpc-go.
type requestBudget struct {
	connBudget
	seq    atomic.Uint64 // requests begun over all connections: the line
	closed atomic.Uint64 // connections closed for the bound
	log    *slog.Logger
	warned atomic.Bool // the first closing is logged, not the next
}

func newRequestBudget(max int64, log *slog.Logger) *requestBudget {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := &requestBudget{log: log}
	b.connBudget = connBudget{max: max, oldest: true, entry: func(u *unreadConn) *budgetEntry { return &u.reqEntry }, evicting: b.warn}
	return b
}

// warn logs the first connection closed for the bound, holding total.
func (b *requestBudget) warn(v *unreadConn, total int64) {
	if !b.warned.Swap(true) {
		b.log.Warn("grpc: requests not yet whole held more than the listener keeps over all its connections; closing the connections whose requests not yet whole began first (counted in sluice_grpc_connections_closed_request_bytes_total, not logged again)",
			"bound_bytes", b.max, "held_bytes", total, "closed_holding_bytes", v.reqEntry.charged, "peer", peerName(v))
	}
}

// peerName is the address of u's client, for the log.
func peerName(u *unreadConn) string {
	if u.Conn == nil || u.RemoteAddr() == nil {
		return ""
	}
	return u.RemoteAddr().String()
}

// requestOpened returns st, the new call of the client's HEADERS h, with
// its request open unless it ended already (END_STREAM) or the call's
// stream was used before (a protocol error grpc-go refuses).
func (u *unreadConn) requestOpened(h frameHeader, st flowStream) flowStream {
	if h.stream > u.lastReq {
		u.lastReq = h.stream
		st.reqOpen = h.flags&flagEndStream == 0
	}
	return st
}

// requestData returns st, a call of the connection, once the client's
// frame h (its DATA, or HEADERS: its trailers) has come: the bytes of a
// DATA frame count while its request is open, and END_STREAM ends it,
// which forgets them. The caller stamps a request whose first bytes came
// (requestBegun): kept out of here, which runs on every frame, inlined.
func (u *unreadConn) requestData(h frameHeader, st flowStream) flowStream {
	switch {
	case !st.reqOpen:
	case h.flags&flagEndStream != 0:
		u.requestEnded(st)
		st.reqOpen, st.reqBytes, st.reqSeq = false, 0, 0
	case h.typ == frameData:
		st.reqBytes += int64(h.length)
		u.reqHeld += int64(h.length)
	}
	return st
}

// requestBegun returns st, call id's request, whose first bytes came:
// stamped with its place in the listener's line (requestBudget.seq), and
// last in the connection's order, whose first request still arriving is
// the connection's place in the line (trimRequests).
func (u *unreadConn) requestBegun(id uint32, st flowStream) flowStream {
	st.reqSeq = u.requests.seq.Add(1)
	if len(u.reqOrder) == cap(u.reqOrder) {
		u.compactRequests()
	}
	u.reqOrder = append(u.reqOrder, id)
	if u.reqOldest == 0 && !u.reqStale { // none other still arriving
		u.reqOldest = st.reqSeq
	}
	return st
}

// requestEnded forgets the bytes of st, a request that ended (END_STREAM,
// a reset, the call's end); the connection's oldest, its place in the line
// is to be found again (trimRequests).
func (u *unreadConn) requestEnded(st flowStream) {
	u.reqHeld -= st.reqBytes
	if st.reqSeq != 0 && st.reqSeq == u.reqOldest {
		u.reqStale = true
	}
}

// arriving reports whether call id's request still counts, stamped.
func (u *unreadConn) arriving(id uint32) bool {
	st, ok := u.streams[id]
	return ok && st.reqOpen && st.reqBytes > 0 && st.reqSeq != 0
}

// trimRequests drops from the front of reqOrder the requests that ended,
// the first one still arriving being the connection's oldest.
func (u *unreadConn) trimRequests() {
	for u.reqFirst < len(u.reqOrder) && !u.arriving(u.reqOrder[u.reqFirst]) {
		u.reqFirst++
	}
	u.reqStale = false
	if u.reqFirst == len(u.reqOrder) {
		u.reqOrder, u.reqFirst, u.reqOldest = u.reqOrder[:0], 0, 0
		return
	}
	u.reqOldest = u.streams[u.reqOrder[u.reqFirst]].reqSeq
}

// compactRequests keeps of reqOrder, full, the requests still arriving,
// in their order, from its start: the order's length stays within twice
// the requests arriving at once (at most the calls in flight), however
// many begin and end behind the oldest.
func (u *unreadConn) compactRequests() {
	n := 0
	for _, id := range u.reqOrder[u.reqFirst:] {
		if u.arriving(id) {
			u.reqOrder[n] = id
			n++
		}
	}
	u.reqOrder, u.reqFirst = u.reqOrder[:n], 0
	u.reqStale = false
	u.reqOldest = 0
	if n > 0 {
		u.reqOldest = u.streams[u.reqOrder[0]].reqSeq
	}
}

// uncharge takes the connection's requests out of the budget: it ends.
// Call it with u.mu held.
func (u *unreadConn) uncharge() {
	if u.reqCharged != 0 && u.requests != nil {
		u.reqCharged = 0
		u.requests.update(u, 0, 0)
	}
}

// RequestBytes returns the bytes of requests not yet whole the listener
// holds, over all its connections (at most MaxRequestBytesTotal).
func (g *GRPC) RequestBytes() int64 {
	n, _ := g.requests.held()
	return n
}

// ClosedRequestBytes returns how many connections were closed for
// MaxRequestBytesTotal.
func (g *GRPC) ClosedRequestBytes() uint64 { return g.requests.closed.Load() }
