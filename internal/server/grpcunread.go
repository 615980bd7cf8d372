package server

import (
	"encoding/binary"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/credentials"
)

// MaxUnreadAnswers bounds the answers a client connection of the gRPC
// listener leaves waiting for flow-control window: answers the server has
// begun (their HEADERS sent) whose message the client's windows (its
// call's, or its connection's) do not let through. A connection leaving
// more for UnreadTimeout on end is closed, which frees them all. Each
// such answer holds about 2.5 KB until the client grants window or the
// connection ends (its age, 5 min and 30 s of grace, if it answers
// keepalive PINGs): a client that sends calls and never reads the
// answers held DefaultMaxConcurrentStreams of them (2.3 MB) on each of
// up to max_connections connections. Answers wait a moment for window
// on a client that reads them too, each time it is a window behind: a
// grpc-go client's windows are 64 KiB until its estimate grows them, so
// with many calls in flight its connection window is used up and topped
// up over and over; what a client that reads never does is leave more
// than MaxUnreadAnswers waiting for UnreadTimeout. Over all connections,
// MaxUnreadTotal bounds them. Envoy grants windows
// of 16 MiB a call and 24 MiB a connection by default (64 KiB at least).
// The stream cap stays where it is, since an Envoy reaching it queues
// its calls in its own codec rather than open another connection (as
// envoyproxy/envoy#13933 reports); and grpc-go has no setting that
// bounds what waits for window (its per-call write quota, 64 KB, bounds
// a streaming call's unsent messages, not how many calls).
const MaxUnreadAnswers = 100

// MaxUnreadTotal bounds the answers waiting for window over all the
// connections of the gRPC listener, however few each leaves waiting
// (unreadBudget): past it, the connections that have left answers
// waiting longest are closed at once, rather than after UnreadTimeout or,
// for those leaving MaxUnreadAnswers or fewer, never. Ten connections'
// worth of answers (25 MB), where each connection may otherwise hold its
// DefaultMaxConcurrentStreams answers for UnreadTimeout, or
// MaxUnreadAnswers until its age, over up to max_connections (10,000 by
// default) connections: 25 GB, or 3 GB for minutes.
const MaxUnreadTotal = 10 * DefaultMaxConcurrentStreams

// UnreadTimeout is how long a connection may leave more than
// MaxUnreadAnswers answers waiting for window, on end, before it is
// closed: the keepalive timeout, the time a client is given to answer.
const UnreadTimeout = DefaultKeepaliveTimeout

// errUnread ends a connection that left more than MaxUnreadAnswers
// answers waiting for window for UnreadTimeout, or that the listener's
// MaxUnreadTotal closed.
var errUnread = errors.New("server: more than " + strconv.Itoa(MaxUnreadAnswers) + " answers waiting for the client's flow-control window for " + UnreadTimeout.String() +
	", or the longest waiting of more than " + strconv.Itoa(MaxUnreadTotal) + " over all connections")

// unreadCreds are the listener's credentials (insecure ones for
// plaintext) with each connection, once handshaken, an unreadConn.
type unreadCreds struct {
	credentials.TransportCredentials
	closed   *atomic.Uint64 // connections closed for their unread answers
	timeout  time.Duration  // UnreadTimeout, shorter in tests
	budget   *unreadBudget  // MaxUnreadTotal, lower in tests
	requests *requestBudget // MaxRequestBytesTotal, lower in tests
}

func (c unreadCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		return conn, info, err
	}
	u := newUnreadConn(conn, c.closed, c.timeout, c.budget)
	u.requests = c.requests
	return u, info, nil
}

func (c unreadCreds) Clone() credentials.TransportCredentials {
	return unreadCreds{TransportCredentials: c.TransportCredentials.Clone(), closed: c.closed, timeout: c.timeout, budget: c.budget, requests: c.requests}
}

// HTTP/2 frame types and flags (RFC 9113 §6) the accounting reads.
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	frameRSTStream    = 0x3
	frameSettings     = 0x4
	frameWindowUpdate = 0x8

	flagEndStream = 0x1
	flagAck       = 0x1

	settingInitialWindowSize = 0x4
	defaultWindow            = 65535
	// maxCollect bounds a SETTINGS or WINDOW_UPDATE payload read for its
	// values: one longer than the listener's frame size (16 KiB) ends the
	// connection in grpc-go anyway.
	maxCollect = 16 << 10
)

// unreadConn is a connection of the gRPC listener that keeps the HTTP/2
// flow-control account of the server's answers, from the frame headers
// (and SETTINGS and WINDOW_UPDATE payloads) that pass, as the client
// grants windows and the server sends: which calls' answers have begun,
// and how much window is left to each call and to the connection. Read
// (grpc-go's reader) and Write (its writer) run on two goroutines; the
// account is under mu. What it reads is read as grpc-go reads it, so its
// windows are never smaller than grpc-go's own: it does not count an
// answer as waiting that grpc-go would send.
//
// An answer waits when its call's window is used up, or the connection's
// is, unless it is idle: a streaming call whose last message went out
// whole (a DATA frame, not empty, shorter than grpc-go's frames, 16 KiB,
// that left both windows open, which grpc-go sends only as a message's
// end) and that the client has sent nothing on since, so that nothing of
// it is known to wait (a health Watch between two statuses; reflection
// between two requests, since a request makes it count again). A
// Watch's next status, a few bytes, may wait unseen. Without it, a
// client reading its answers with more than MaxUnreadAnswers such calls
// open had them counted, and kept in the clock's backlog (below) until
// they ended, whenever its connection's window ran out for a moment, and
// was closed after the timeout.
//
// More than MaxUnreadAnswers waiting starts a clock, which closes the
// connection after the timeout unless those of its answers that waited
// when it started are down to MaxUnreadAnswers first: the backlog
// drained, those answers sent whole (or reset). A window granted does
// not stop it, since the count of answers waiting falls for a moment on
// any window, until the server has sent what it lets through: a byte of
// window every few seconds kept the clock from running out, and the
// answers waiting, indefinitely. Every answer waiting, the clock running
// or not, counts toward the listener's bound (unreadBudget).
//
// From the client's frames it also counts the bytes of its calls'
// requests not yet whole, toward the listener's MaxRequestBytesTotal
// (requestBudget, grpcrequests.go).
type unreadConn struct {
	net.Conn
	closed  *atomic.Uint64
	timeout time.Duration
	budget  *unreadBudget
	entry   budgetEntry // under budget.mu

	mu        sync.Mutex
	in, out   frameScanner
	initial   int64 // the client's SETTINGS_INITIAL_WINDOW_SIZE
	window    int64 // the connection's window left
	streams   map[uint32]flowStream
	started   int         // streams whose answer has begun
	exhausted int         // of them, those with no window of their own left
	idle      int         // of them, those idle with window of their own left
	flagged   int         // streams idle, window or not
	timer     *time.Timer // the clock: running from more than MaxUnreadAnswers waiting
	timerGen  uint64      // clocks started, the running one's number
	backlog   int         // answers waiting when the clock started, not since ended or idle
	over      bool        // the connection was closed, for why
	shut      bool        // Close was called
	charged   int         // the answers waiting the budget counts
	why       error       // why it was closed: errUnread, or errRequestBytes

	// The requests not yet whole (grpcrequests.go).
	requests   *requestBudget // nil: not bounded
	reqEntry   budgetEntry    // under requests.mu
	lastReq    uint32         // the highest stream the client opened
	reqHeld    int64          // bytes of DATA received on its calls' requests not yet whole
	reqCharged int64          // of them, those the budget counts
	reqOrder   []uint32       // the calls whose request's bytes began to count, in that order (with requests)
	reqFirst   int            // of reqOrder, the first not known to have ended
	reqOldest  uint64         // the oldest request's stamp (requestBegun), 0 if none
	reqStale   bool           // the oldest request ended: reqOrder's front is to be trimmed
	reqSince   uint64         // the stamp the budget counts
}

// flowStream is a call of the connection: its window left, whether its
// answer has begun, whether it is idle, and whether it is in the
// running clock's backlog.
type flowStream struct {
	window  int64
	started bool
	idle    bool
	backlog bool
	// The call's request: open (no END_STREAM from the client yet), the
	// bytes of DATA received on it while open, and the stamp of its first
	// (requestBegun).
	reqOpen  bool
	reqBytes int64
	reqSeq   uint64
}

// waiting reports whether st's answer may wait for window: begun, and its
// own window used up or not idle (then it waits when the connection's
// window is used up).
func (st flowStream) waiting() bool { return st.started && (st.window <= 0 || !st.idle) }

// maxDataFrame is the size of grpc-go's DATA frames (http2MaxFrameLen):
// one shorter, which leaves windows open, ends a message.
const maxDataFrame = 16 << 10

func newUnreadConn(c net.Conn, closed *atomic.Uint64, timeout time.Duration, budget *unreadBudget) *unreadConn {
	u := &unreadConn{Conn: c, closed: closed, timeout: timeout, budget: budget, initial: defaultWindow, window: defaultWindow, streams: map[uint32]flowStream{}}
	u.in.skip = len(clientPreface)
	return u
}

// clientPreface opens what the client sends (RFC 9113 §3.4).
const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

func (u *unreadConn) Read(p []byte) (int, error) {
	n, err := u.Conn.Read(p)
	if n > 0 {
		if why := u.account(&u.in, p[:n], u.received); why != nil {
			return 0, why
		}
	}
	return n, err
}

func (u *unreadConn) Write(p []byte) (int, error) {
	if why := u.account(&u.out, p, u.sent); why != nil {
		return 0, why
	}
	return u.Conn.Write(p)
}

// account scans b with s, passing its frames to f, starts the clock as
// more than MaxUnreadAnswers answers wait for window, stops it as its
// backlog drains, tells the budgets the answers waiting and the bytes of
// requests not yet whole, closes the connections the budgets have
// closed, and returns why this one was closed (nil: it was not).
func (u *unreadConn) account(s *frameScanner, b []byte, f func(h frameHeader, payload []byte)) error {
	u.mu.Lock()
	s.scan(b, f)
	if u.over || u.shut {
		why := u.why
		u.mu.Unlock()
		return why
	}
	held := u.exhausted
	if u.window <= 0 {
		held = u.started - u.idle
	}
	if u.timer != nil && u.backlog <= MaxUnreadAnswers {
		u.timer.Stop()
		u.timer = nil
	}
	if u.timer == nil && held > MaxUnreadAnswers {
		u.startClock()
	}
	var closing []*unreadConn
	if held != u.charged {
		u.charged = held
		closing = u.budget.update(u, int64(held), 0)
	}
	for _, v := range closing {
		if v == u {
			u.stop(errUnread)
		}
	}
	var cut []*unreadConn
	if u.reqStale {
		u.trimRequests()
	}
	if (u.reqHeld != u.reqCharged || u.reqOldest != u.reqSince) && !u.over && u.requests != nil {
		u.reqCharged, u.reqSince = u.reqHeld, u.reqOldest
		cut = u.requests.update(u, u.reqHeld, u.reqOldest)
		for _, v := range cut {
			if v == u {
				u.stop(errRequestBytes)
			}
		}
	}
	why := u.why
	u.mu.Unlock()
	u.closeGivenUp(closing, errUnread, u.closed)
	if cut != nil {
		u.closeGivenUp(cut, errRequestBytes, &u.requests.closed)
	}
	return why
}

// closeGivenUp closes the connections vs a budget gave up for why, each
// counted once in closed: u itself, which account has stopped already,
// at once; the others through closeFor. u.mu is not held.
func (u *unreadConn) closeGivenUp(vs []*unreadConn, why error, closed *atomic.Uint64) {
	for _, v := range vs {
		if v == u {
			closed.Add(1)
			u.Conn.Close()
		} else {
			v.closeFor(why, closed)
		}
	}
}

// startClock starts the clock, with the answers waiting now as its
// backlog.
func (u *unreadConn) startClock() {
	u.timerGen++
	u.backlog = 0
	for id, st := range u.streams {
		if w := st.waiting(); w || st.backlog {
			st.backlog = w
			u.streams[id] = st
			if w {
				u.backlog++
			}
		}
	}
	gen := u.timerGen
	u.timer = time.AfterFunc(u.timeout, func() { u.expire(gen) })
}

// stop marks the connection closed for why (its answers, errUnread, or
// its requests' bytes, errRequestBytes) and stops its clock.
func (u *unreadConn) stop(why error) {
	u.over, u.why = true, why
	if u.timer != nil {
		u.timer.Stop()
		u.timer = nil
	}
}

// uncount takes the connection out of the budget.
func (u *unreadConn) uncount() {
	if u.charged != 0 {
		u.charged = 0
		u.budget.update(u, 0, 0)
	}
}

// expire closes the connection, counted once, if gen is the clock still
// running: more than MaxUnreadAnswers answers that waited when it
// started still wait.
func (u *unreadConn) expire(gen uint64) {
	u.mu.Lock()
	fire := u.timer != nil && u.timerGen == gen && !u.shut
	if fire {
		u.stop(errUnread)
		u.uncount()
		u.uncharge()
	}
	u.mu.Unlock()
	if fire {
		u.closed.Add(1)
		u.Conn.Close()
	}
}

// Close closes the connection and stops the timer.
func (u *unreadConn) Close() error {
	u.mu.Lock()
	u.shut = true
	if u.timer != nil {
		u.timer.Stop()
		u.timer = nil
	}
	u.uncount()
	u.uncharge()
	u.mu.Unlock()
	return u.Conn.Close()
}

// received accounts a frame from the client.
func (u *unreadConn) received(h frameHeader, payload []byte) {
	switch h.typ {
	case frameHeaders:
		st, ok := u.streams[h.stream]
		if !ok && h.stream%2 == 1 {
			u.streams[h.stream] = u.requestOpened(h, flowStream{window: u.initial})
		} else if ok && st.reqOpen {
			u.streams[h.stream] = u.requestData(h, st) // its trailers, perhaps
		}
	case frameData:
		st, ok := u.streams[h.stream]
		if !ok {
			return
		}
		nst := u.requestData(h, st)
		if nst.reqSeq == 0 && nst.reqBytes > 0 && u.requests != nil {
			nst = u.requestBegun(h.stream, nst)
		}
		// A request: its answer may come, and wait, unseen.
		if st.idle {
			nst.idle = false
			u.set(h.stream, st, nst)
		} else if st.reqOpen {
			u.streams[h.stream] = nst
		}
	case frameRSTStream:
		u.end(h.stream)
	case frameWindowUpdate:
		if len(payload) != 4 {
			return
		}
		inc := int64(binary.BigEndian.Uint32(payload) & (1<<31 - 1))
		if h.stream == 0 {
			u.window += inc
		} else if st, ok := u.streams[h.stream]; ok {
			nst := st
			nst.window += inc
			u.set(h.stream, st, nst)
		}
	case frameSettings:
		if h.flags&flagAck != 0 {
			return
		}
		for ; len(payload) >= 6; payload = payload[6:] {
			if binary.BigEndian.Uint16(payload) == settingInitialWindowSize {
				v := int64(binary.BigEndian.Uint32(payload[2:]))
				delta := v - u.initial
				u.initial = v
				for id, st := range u.streams {
					nst := st
					nst.window += delta
					u.set(id, st, nst)
				}
			}
		}
	}
}

// sent accounts a frame from the server.
func (u *unreadConn) sent(h frameHeader, _ []byte) {
	switch h.typ {
	case frameData:
		u.window -= int64(h.length)
		if st, ok := u.streams[h.stream]; ok {
			nst := st
			nst.window -= int64(h.length)
			nst.idle = h.length > 0 && h.length < maxDataFrame && nst.window > 0 && u.window > 0
			u.set(h.stream, st, nst)
		}
		if h.flags&flagEndStream != 0 {
			u.end(h.stream)
		}
	case frameHeaders:
		if h.flags&flagEndStream != 0 {
			u.end(h.stream)
		} else if st, ok := u.streams[h.stream]; ok && !st.started {
			nst := st
			nst.started = true
			u.set(h.stream, st, nst)
		}
	case frameRSTStream:
		u.end(h.stream)
	}
}

// set replaces stream id's account, st, by nst, keeping the counts: a
// stream leaves the clock's backlog once its answer no longer waits.
func (u *unreadConn) set(id uint32, st, nst flowStream) {
	u.tally(st, -1)
	u.tally(nst, 1)
	if nst.backlog && !nst.waiting() {
		nst.backlog = false
		if u.timer != nil {
			u.backlog--
		}
	}
	u.streams[id] = nst
}

// tally adds d times st to the counts of answers begun, exhausted, idle.
func (u *unreadConn) tally(st flowStream, d int) {
	if !st.started {
		return
	}
	if st.idle {
		u.flagged += d
	}
	u.started += d
	if st.window <= 0 {
		u.exhausted += d
	} else if st.idle {
		u.idle += d
	}
}

// end forgets the stream id: it ended (its trailers, or a reset).
func (u *unreadConn) end(id uint32) {
	st, ok := u.streams[id]
	if !ok {
		return
	}
	u.tally(st, -1)
	if st.backlog && u.timer != nil {
		u.backlog--
	}
	u.requestEnded(st)
	delete(u.streams, id)
}

// ClosedUnread returns how many connections were closed for leaving more
// than MaxUnreadAnswers answers waiting for window for the unread timeout,
// or for MaxUnreadTotal.
func (g *GRPC) ClosedUnread() uint64 { return g.unread.Load() }
