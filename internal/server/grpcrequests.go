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
// the server): past it, the connections holding the most are closed, at
// once, until the rest hold no more (requestBudget). Without it, a client
// sending unfinished requests held up to MaxRecvMsgSize each (grpc-go
// widens a call's flow-control window to the message it reads) on each of
// the DefaultMaxCalls calls waiting for their request: 4 GB, as much as it
// sent.
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
var errRequestBytes = errors.New("server: the connection holding the most bytes of requests not yet whole when all connections together held more than " +
	strconv.Itoa(MaxRequestBytesTotal>>20) + " MiB")

// requestBudget bounds the bytes of requests not yet whole over all the
// connections of a listener (MaxRequestBytesTotal): each connection
// counts the DATA of its calls whose request is open (unreadConn.received)
// and tells the budget whenever its count changes, once per read at
// most; past the bound, the connections holding the most are closed until
// the rest are within it. The most, not the longest: a connection's count
// is its own frames, so that one counting more than it holds (a
// reflection stream, whose requests are read one by one as they come,
// counts them all until it ends) can only have itself closed. A
// connection holding none (Envoy's, between two large requests; any
// connection sending only whole small requests) is not listed.
//
// What it counts is what grpc-go holds of a request: grpc-go reads it as
// it comes into the call's message, up to the message's length, and
// frees it when the call ends. The count is made before grpc-go reads the
// frames: a connection closed for the bound is closed before what took
// the count past it reaches grpc-go.
type requestBudget struct {
	connBudget
	closed atomic.Uint64 // connections closed for the bound
	log    *slog.Logger
	warned atomic.Bool // the first closing is logged, not the next
}

func newRequestBudget(max int64, log *slog.Logger) *requestBudget {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := &requestBudget{log: log}
	b.connBudget = connBudget{max: max, most: true, entry: func(u *unreadConn) *budgetEntry { return &u.reqEntry }, evicting: b.warn}
	return b
}

// warn logs the first connection closed for the bound, holding total.
func (b *requestBudget) warn(v *unreadConn, total int64) {
	if !b.warned.Swap(true) {
		b.log.Warn("grpc: requests not yet whole held more than the listener keeps over all its connections; closing the connections holding the most (counted in sluice_grpc_connections_closed_request_bytes_total, not logged again)",
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
// which forgets them.
func (u *unreadConn) requestData(h frameHeader, st flowStream) flowStream {
	switch {
	case !st.reqOpen:
	case h.flags&flagEndStream != 0:
		u.reqHeld -= st.reqBytes
		st.reqOpen, st.reqBytes = false, 0
	case h.typ == frameData:
		st.reqBytes += int64(h.length)
		u.reqHeld += int64(h.length)
	}
	return st
}

// uncharge takes the connection's requests out of the budget: it ends.
// Call it with u.mu held.
func (u *unreadConn) uncharge() {
	if u.reqCharged != 0 && u.requests != nil {
		u.reqCharged = 0
		u.requests.update(u, 0)
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
