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
// whole on each connection and, past its bound, closes those holding the
// most, not the one whose bytes took it past, until the rest are within
// it, counting them no more; the first closing is logged at WARN, once.
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
	check("a at 600", b.update(a, 600), "", 600, "a")
	check("c at 300", b.update(c, 300), "", 900, "ac")
	check("c at 0", b.update(c, 0), "", 600, "a")
	check("c at 350", b.update(c, 350), "", 950, "ac")
	check("d at 100", b.update(d, 100), "a", 450, "cd") // d took it past; a held the most
	check("a again", b.update(a, 10), "", 450, "cd")
	check("d at 700", b.update(d, 700), "d", 350, "c")
	check("c at 2000", b.update(c, 2000), "c", 0, "")
	if _, peak := b.held(); peak != 950 {
		t.Errorf("peak %d, want 950: the most held within the bound", peak)
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 || !strings.Contains(logs.String(), "sluice_grpc_connections_closed_request_bytes_total") {
		t.Errorf("%d WARN lines, want 1 naming the metric:\n%s", n, logs.String())
	}
}

// TestRequestBudgetClosesHolder: past the bound, the connections holding
// the most are closed, each counted once, and their reads fail; a
// connection holding less carries on.
func TestRequestBudgetClosesHolder(t *testing.T) {
	b := newRequestBudget(1000, nil)
	big, small := requestConn(t, b), requestConn(t, b)
	frames := func(id uint32, n int) []byte {
		var in bytes.Buffer
		fr := http2.NewFramer(&in, nil)
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: []byte("h"), EndHeaders: true})
		fr.WriteData(id, false, make([]byte, n))
		return in.Bytes()
	}
	if err := big.account(&big.in, frames(1, 800), big.received); err != nil {
		t.Fatal(err)
	}
	// small takes the count past 1,000: big, holding the most, is closed.
	if err := small.account(&small.in, frames(1, 300), small.received); err != nil {
		t.Fatalf("the connection holding less: %v, want it open", err)
	}
	if err := big.account(&big.in, frames(3, 1), big.received); err != errRequestBytes {
		t.Fatalf("the connection holding the most: %v, want %v", err, errRequestBytes)
	}
	if _, err := big.Conn.Read(make([]byte, 1)); err == nil {
		t.Error("its connection reads on, want it closed")
	}
	if got := b.closed.Load(); got != 1 {
		t.Errorf("%d closed, want 1", got)
	}
	// small alone past the bound closes itself, before its read is
	// passed on.
	if err := small.account(&small.in, frames(3, 800), small.received); err != errRequestBytes {
		t.Fatalf("past the bound alone: %v, want %v", err, errRequestBytes)
	}
	if total, peak := b.held(); total != 0 || peak != 800 || b.closed.Load() != 2 {
		t.Errorf("held %d, peak %d, closed %d; want 0, 800, 2", total, peak, b.closed.Load())
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
