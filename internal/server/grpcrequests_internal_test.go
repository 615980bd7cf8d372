package server

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// requestConn is a connection of a listener whose requests not yet whole
// count in b, its client's bytes read after the preface, over a pipe
// (closing it for the bound closes the pipe).
func requestConn(t testing.TB, b *requestBudget) *unreadConn {
	c, peer := net.Pipe()
	t.Cleanup(func() { c.Close(); peer.Close() })
	u := newUnreadConn(c, new(atomic.Uint64), time.Hour, newUnreadBudget(MaxUnreadTotal))
	u.in.skip = 0
	u.requests = b
	return u
}

// TestRequestAccount: a connection counts the bytes of DATA its client
// sent on each call whose request is open, from its HEADERS on, and
// forgets them as the request ends (END_STREAM on DATA or on trailers),
// as either side resets the call, or as the server ends it; the frames
// the client sends otherwise (SETTINGS, PING, WINDOW_UPDATE, GOAWAY,
// PRIORITY, CONTINUATION, DATA on a call it never opened or has ended,
// HEADERS reopening a call ended) change nothing. Each step is fed in
// two reads cut inside the frame's header.
func TestRequestAccount(t *testing.T) {
	b := newRequestBudget(1<<40, nil)
	u := requestConn(t, b)
	var in, out bytes.Buffer
	fin, fout := http2.NewFramer(&in, nil), http2.NewFramer(&out, nil)
	step := func(what string, want int64) {
		t.Helper()
		for _, side := range []struct {
			s   *frameScanner
			buf *bytes.Buffer
			f   func(frameHeader, []byte)
		}{{&u.in, &in, u.received}, {&u.out, &out, u.sent}} {
			p := side.buf.Bytes()
			cut := min(len(p), 4) // a frame header spans two reads
			if err := u.account(side.s, p[:cut], side.f); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if err := u.account(side.s, p[cut:], side.f); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			side.buf.Reset()
		}
		if total, _ := b.held(); u.reqHeld != want || total != want {
			t.Fatalf("after %s: %d bytes counted, %d in the budget; want %d", what, u.reqHeld, total, want)
		}
	}
	open := func(id uint32) {
		fin.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: []byte("h"), EndHeaders: true})
	}
	open(1)
	fin.WriteData(1, false, make([]byte, 100))
	fin.WriteData(1, false, make([]byte, 50))
	step("150 bytes on call 1", 150)
	fin.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
	fin.WritePing(false, [8]byte{1})
	fin.WriteWindowUpdate(0, 1000)
	fin.WriteWindowUpdate(1, 1000)
	fin.WritePriority(1, http2.PriorityParam{StreamDep: 0, Weight: 9})
	fin.WriteGoAway(0, http2.ErrCodeNo, []byte("debug"))
	fin.WriteData(2, false, make([]byte, 70)) // an even stream: never opened
	fin.WriteData(99, false, make([]byte, 70))
	step("frames of no open request", 150)
	open(3)
	fin.WriteData(3, true, make([]byte, 40)) // whole in one frame: never counted
	step("call 3 whole", 150)
	fin.WriteData(3, false, make([]byte, 30)) // after its END_STREAM
	step("DATA after END_STREAM", 150)
	fin.WriteRSTStream(1, http2.ErrCodeCancel)
	step("client reset of 1", 0)
	open(1) // a call ended, reopened: a protocol error, never an open request
	fin.WriteData(1, false, make([]byte, 60))
	step("call 1 reopened", 0)
	// HEADERS split by CONTINUATION, END_STREAM on the HEADERS frame.
	fin.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: []byte("h1")})
	fin.WriteContinuation(5, true, []byte("h2"))
	fin.WriteData(5, false, make([]byte, 1000))
	open(7)
	fin.WriteData(7, false, make([]byte, 20))
	step("calls 5 and 7", 1020)
	fout.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: []byte("s"), EndHeaders: true, EndStream: true})
	step("server ends 5 (trailers only)", 20)
	fin.WriteHeaders(http2.HeadersFrameParam{StreamID: 7, BlockFragment: []byte("t"), EndHeaders: true, EndStream: true})
	step("client trailers of 7", 0)
	open(9)
	fin.WriteDataPadded(9, false, make([]byte, 10), make([]byte, 5)) // padding counts as flow control counts it
	open(11)
	fin.WriteData(11, false, make([]byte, 300))
	step("calls 9 and 11", 16+300)
	fout.WriteRSTStream(9, http2.ErrCodeCancel)
	step("server reset of 9", 300)
	fout.WriteHeaders(http2.HeadersFrameParam{StreamID: 11, BlockFragment: []byte("s"), EndHeaders: true})
	fout.WriteData(11, false, make([]byte, 10))
	fout.WriteHeaders(http2.HeadersFrameParam{StreamID: 11, BlockFragment: []byte("t"), EndHeaders: true, EndStream: true})
	step("server answers 11 whole", 0)
	open(13)
	fin.WriteData(13, false, make([]byte, 500))
	step("call 13", 500)
	u.Close()
	if total, _ := b.held(); total != 0 || b.head != nil {
		t.Fatalf("after the connection's end: %d bytes in the budget, want 0, none listed", total)
	}
}

// TestRequestBudget: the budget counts the bytes of requests not yet
// whole on each connection and, past its bound, closes those whose oldest
// request began first (the least stamp), not those holding the most nor
// the one whose bytes took it past, until the rest are within it,
// counting them no more; a connection's place moves on as its oldest
// request ends. The first closing is logged at WARN, once.
func TestRequestBudget(t *testing.T) {
	var logs strings.Builder
	b := newRequestBudget(1000, slog.New(slog.NewTextHandler(&logs, nil)))
	a, c, d := &unreadConn{}, &unreadConn{}, &unreadConn{}
	names := map[*unreadConn]string{a: "a", c: "c", d: "d"}
	check := func(step string, closing []*unreadConn, want string, total int64, listed string) {
		t.Helper()
		var got string
		for _, v := range closing {
			got += names[v]
		}
		seen := map[string]bool{}
		for v := b.head; v != nil; v = v.reqEntry.next {
			seen[names[v]] = true
		}
		var list string
		for _, n := range []string{"a", "c", "d"} {
			if seen[n] {
				list += n
			}
		}
		if got != want || b.total != total || list != listed {
			t.Fatalf("after %s: closing %q, total %d, listed %q; want %q, %d, %q", step, got, b.total, list, want, total, listed)
		}
	}
	check("a at 600", b.update(a, 600, 1), "", 600, "a")
	check("c at 300", b.update(c, 300, 2), "", 900, "ac")
	check("c at 0", b.update(c, 0, 0), "", 600, "a")
	check("c at 350", b.update(c, 350, 3), "", 950, "ac")
	check("a's oldest ends", b.update(a, 500, 5), "", 850, "ac") // a's next began after c's
	check("d at 200", b.update(d, 200, 6), "c", 700, "ad")       // d took it past; a holds the most; c began first
	check("c again", b.update(c, 10, 7), "", 700, "ad")
	check("d at 600", b.update(d, 600, 6), "a", 600, "d")
	check("d at 2000", b.update(d, 2000, 6), "d", 0, "")
	if _, peak := b.held(); peak != 950 {
		t.Errorf("peak %d, want 950: the most held within the bound", peak)
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 || !strings.Contains(logs.String(), "sluice_grpc_connections_closed_request_bytes_total") {
		t.Errorf("%d WARN lines, want 1 naming the metric:\n%s", n, logs.String())
	}
}

// requestFrames are HEADERS opening call id, if open, then n bytes of
// DATA on it, with END_STREAM if end.
func requestFrames(id uint32, open bool, n int, end bool) []byte {
	var in bytes.Buffer
	fr := http2.NewFramer(&in, nil)
	if open {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: []byte("h"), EndHeaders: true})
	}
	fr.WriteData(id, end, make([]byte, n))
	return in.Bytes()
}

// TestRequestBudgetClosesOldest: past the bound, the connection whose
// request began first is closed, though it holds less than the one whose
// request took the count past, counted once, and its reads fail; the
// other carries on.
func TestRequestBudgetClosesOldest(t *testing.T) {
	b := newRequestBudget(1000, nil)
	old, young := requestConn(t, b), requestConn(t, b)
	if err := old.account(&old.in, requestFrames(1, true, 300, false), old.received); err != nil {
		t.Fatal(err)
	}
	// young takes the count past 1,000: old, begun first, is closed.
	if err := young.account(&young.in, requestFrames(1, true, 800, false), young.received); err != nil {
		t.Fatalf("the connection whose request began last: %v, want it open", err)
	}
	if err := old.account(&old.in, requestFrames(3, true, 1, false), old.received); err != errRequestBytes {
		t.Fatalf("the connection whose request began first: %v, want %v", err, errRequestBytes)
	}
	if _, err := old.Conn.Read(make([]byte, 1)); err == nil {
		t.Error("its connection reads on, want it closed")
	}
	if got := b.closed.Load(); got != 1 {
		t.Errorf("%d closed, want 1", got)
	}
	// young alone past the bound closes itself, before its read is
	// passed on.
	if err := young.account(&young.in, requestFrames(3, true, 800, false), young.received); err != errRequestBytes {
		t.Fatalf("past the bound alone: %v, want %v", err, errRequestBytes)
	}
	if total, peak := b.held(); total != 0 || peak != 800 || b.closed.Load() != 2 {
		t.Errorf("held %d, peak %d, closed %d; want 0, 800, 2", total, peak, b.closed.Load())
	}
}

// TestRequestAge: a connection's place in the line is its oldest request
// still arriving, over its calls: more bytes on it (a trickle) do not
// move it, its end moves it to the next oldest, a request whole in one
// frame never takes one. Past the bound, the connection whose oldest
// request began first is closed though its bytes came last.
func TestRequestAge(t *testing.T) {
	b := newRequestBudget(1000, nil)
	x, y, z := requestConn(t, b), requestConn(t, b), requestConn(t, b)
	feed := func(u *unreadConn, p []byte) {
		t.Helper()
		if err := u.account(&u.in, p, u.received); err != nil {
			t.Fatal(err)
		}
	}
	since := func(u *unreadConn) uint64 {
		b.mu.Lock()
		defer b.mu.Unlock()
		return u.reqEntry.since
	}
	feed(x, requestFrames(1, true, 100, false)) // 1
	feed(y, requestFrames(1, true, 100, false)) // 2
	feed(x, requestFrames(3, true, 100, false)) // 3
	feed(z, requestFrames(1, true, 10, true))   // whole: none
	if since(x) != 1 || since(y) != 2 || z.reqEntry.listed {
		t.Fatalf("places %d, %d, z listed %v; want 1, 2, not listed", since(x), since(y), z.reqEntry.listed)
	}
	feed(x, requestFrames(1, false, 50, false)) // a trickle on x's oldest
	if since(x) != 1 {
		t.Fatalf("x's place after a trickle: %d, want 1", since(x))
	}
	feed(x, requestFrames(1, false, 0, true)) // x's oldest ends
	if since(x) != 3 || x.reqHeld != 100 {
		t.Fatalf("x's place after its oldest ended: %d, holding %d; want 3, 100", since(x), x.reqHeld)
	}
	// z takes the count past 1,000: y, begun before x's oldest, goes.
	feed(z, requestFrames(3, true, 850, false))
	if err := y.account(&y.in, requestFrames(3, true, 1, false), y.received); err != errRequestBytes {
		t.Fatalf("y, whose oldest began first: %v, want %v", err, errRequestBytes)
	}
	feed(x, requestFrames(3, false, 1, false))
	if total, _ := b.held(); total != 951 || b.closed.Load() != 1 {
		t.Errorf("held %d, closed %d; want 951, 1", total, b.closed.Load())
	}
}

// TestRequestOrderBounded: a connection whose oldest request stays open
// while others begin and end behind it, or whose requests overlap so
// that it never holds none (an Envoy connection's large requests), keeps
// its order within a few entries, and its place is always its oldest
// request still arriving.
func TestRequestOrderBounded(t *testing.T) {
	b := newRequestBudget(1<<40, nil)
	u := requestConn(t, b)
	feed := func(p []byte) {
		t.Helper()
		if err := u.account(&u.in, p, u.received); err != nil {
			t.Fatal(err)
		}
	}
	want := func(id uint32) {
		t.Helper()
		if got := u.streams[id].reqSeq; got == 0 || u.reqEntry.since != got {
			t.Fatalf("place %d, want call %d's, %d", u.reqEntry.since, id, got)
		}
	}
	feed(requestFrames(1, true, 1, false))
	for id := uint32(3); id < 20000; id += 2 {
		feed(requestFrames(id, true, 5, false))
		var rst bytes.Buffer
		http2.NewFramer(&rst, nil).WriteRSTStream(id, http2.ErrCodeCancel)
		feed(rst.Bytes())
		want(1)
	}
	if cap(u.reqOrder) > 8 {
		t.Errorf("order of %d entries (%d kept) after 10,000 calls behind one open: want a few", cap(u.reqOrder), len(u.reqOrder))
	}
	// Overlapping: each request begins before the one before it ends.
	feed(requestFrames(1, false, 0, true))
	prev := uint32(0)
	for id := uint32(20001); id < 40000; id += 2 {
		feed(requestFrames(id, true, 100, false))
		if prev != 0 {
			want(prev)
			feed(requestFrames(prev, false, 100, true))
		}
		want(id)
		prev = id
	}
	if cap(u.reqOrder) > 8 || u.reqHeld != 100 {
		t.Errorf("order of %d entries, holding %d, after 10,000 overlapping requests: want a few, 100", cap(u.reqOrder), u.reqHeld)
	}
}

// BenchmarkRequestAccountLarge is what the account costs the largest
// request Envoy sends with its default header bound (3.75 MiB: 240 DATA
// frames of 16 KiB), read as grpc-go reads, 32 KiB at a time: each read
// changes the bytes held, which the budget is told.
func BenchmarkRequestAccountLarge(b *testing.B) {
	const size = 64 * 60 << 10
	var in bytes.Buffer
	fr := http2.NewFramer(&in, nil)
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: make([]byte, 20), EndHeaders: true})
	chunk := make([]byte, 16<<10)
	for left := size; left > 0; left -= len(chunk) {
		fr.WriteData(1, left <= len(chunk), chunk[:min(left, len(chunk))])
	}
	p := in.Bytes()
	var out bytes.Buffer
	http2.NewFramer(&out, nil).WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: make([]byte, 5), EndHeaders: true, EndStream: true})
	q := out.Bytes()
	u := requestConn(b, newRequestBudget(MaxRequestBytesTotal, nil))
	b.SetBytes(size)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		id := uint32(2*i+1) & (1<<31 - 1)
		for f := p; len(f) >= 9; f = f[9+(int(f[0])<<16|int(f[1])<<8|int(f[2])):] {
			binary.BigEndian.PutUint32(f[5:], id)
		}
		binary.BigEndian.PutUint32(q[5:], id)
		for rest := p; len(rest) > 0; {
			n := min(len(rest), 32<<10)
			u.account(&u.in, rest[:n], u.received)
			rest = rest[n:]
		}
		u.account(&u.out, q, u.sent) // its answer, trailers only
	}
	if u.reqHeld != 0 || len(u.streams) != 0 {
		b.Fatalf("%d bytes held, %d streams after the calls, want none", u.reqHeld, len(u.streams))
	}
}
