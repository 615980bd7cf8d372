package server

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/net/http2"
)

// TestFrameScannerPieces: frames fed in pieces of any size, the client
// preface first, come out whole and in order, with the payloads of
// SETTINGS and WINDOW_UPDATE frames, as x/net's framer wrote them.
func TestFrameScannerPieces(t *testing.T) {
	var b bytes.Buffer
	b.WriteString(clientPreface)
	fr := http2.NewFramer(&b, nil)
	fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 7}, http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 14})
	fr.WriteSettingsAck()
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte("abc"), EndHeaders: true})
	fr.WriteData(1, true, bytes.Repeat([]byte{'x'}, 300))
	fr.WriteWindowUpdate(0, 1000)
	fr.WriteWindowUpdate(3, 1<<31-1)
	fr.WriteRSTStream(3, http2.ErrCodeCancel)
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: []byte("d"), EndHeaders: true, EndStream: true})
	fr.WriteData(5, false, nil)
	want := []string{
		"len=12 type=4 flags=0 stream=0 payload=000400000007000500004000",
		"len=0 type=4 flags=1 stream=0 payload=",
		"len=3 type=1 flags=4 stream=1 payload=",
		"len=300 type=0 flags=1 stream=1 payload=",
		"len=4 type=8 flags=0 stream=0 payload=000003e8",
		"len=4 type=8 flags=0 stream=3 payload=7fffffff",
		"len=4 type=3 flags=0 stream=3 payload=",
		"len=1 type=1 flags=5 stream=5 payload=",
		"len=0 type=0 flags=0 stream=5 payload=",
	}
	all := b.Bytes()
	rnd := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		s := frameScanner{skip: len(clientPreface)}
		var got []string
		f := func(h frameHeader, p []byte) {
			got = append(got, fmt.Sprintf("len=%d type=%d flags=%d stream=%d payload=%x", h.length, h.typ, h.flags, h.stream, p))
		}
		for rest := all; len(rest) > 0; {
			n := 1 + rnd.IntN(min(len(rest), 1+round%40))
			s.scan(rest[:n], f)
			rest = rest[n:]
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("round %d: frames\n%q\nwant\n%q", round, got, want)
		}
	}
}

// TestUnreadAccount: the account of answers waiting for window follows
// the client's windows (SETTINGS, WINDOW_UPDATE, per call and per
// connection) and the server's frames.
func TestUnreadAccount(t *testing.T) {
	u := &unreadConn{initial: defaultWindow, window: defaultWindow, streams: map[uint32]flowStream{}}
	in := func(typ byte, flags byte, id uint32, payload ...byte) {
		u.received(frameHeader{length: uint32(len(payload)), typ: typ, flags: flags, stream: id}, payload)
	}
	out := func(typ byte, flags byte, id uint32, n uint32) {
		u.sent(frameHeader{length: n, typ: typ, flags: flags, stream: id}, nil)
	}
	check := func(step string, started, exhausted int, window int64) {
		t.Helper()
		if u.started != started || u.exhausted != exhausted || u.window != window {
			t.Fatalf("after %s: started %d, exhausted %d, window %d; want %d, %d, %d", step, u.started, u.exhausted, u.window, started, exhausted, window)
		}
	}
	in(frameSettings, 0, 0, 0, 4, 0, 0, 0, 10) // initial window 10
	for _, id := range []uint32{1, 3, 5} {
		in(frameHeaders, 4, id)
		out(frameHeaders, 4, id, 2)
	}
	check("3 answers begun", 3, 0, defaultWindow)
	out(frameData, 0, 1, 10)
	out(frameData, 0, 3, 10)
	check("2 windows used up", 3, 2, defaultWindow-20)
	in(frameWindowUpdate, 0, 1, 0, 0, 0, 5)
	check("WINDOW_UPDATE on 1", 3, 1, defaultWindow-20)
	out(frameHeaders, flagEndStream, 3, 2)
	check("trailers of 3", 2, 0, defaultWindow-20)
	in(frameSettings, 0, 0, 0, 4, 0, 0, 0, 0) // initial window 0: 1 at -5, 5 at 0
	check("initial window 0", 2, 2, defaultWindow-20)
	in(frameRSTStream, 0, 5, 0, 0, 0, 8)
	check("reset of 5", 1, 1, defaultWindow-20)
	in(frameSettings, 0, 0, 0, 4, 0, 0, 1, 0) // initial window 256: 1 at 251
	check("initial window 256", 1, 0, defaultWindow-20)
	out(frameData, 0, 9, defaultWindow-20) // another call's answer
	check("connection window used up", 1, 0, 0)
	in(frameWindowUpdate, 0, 0, 0, 0, 0, 1)
	check("connection WINDOW_UPDATE", 1, 0, 1)
	out(frameRSTStream, 0, 1, 4)
	check("server reset of 1", 0, 0, 1)
	if len(u.streams) != 0 {
		t.Errorf("%d streams left in the account, want 0", len(u.streams))
	}
}

// BenchmarkUnreadAccount is what the account of answers waiting for
// window costs a call, as Envoy makes it: its HEADERS and DATA read, its
// answer's HEADERS, DATA and trailers written, each in a read or write
// of its own (under load grpc-go batches several calls in one).
func BenchmarkUnreadAccount(b *testing.B) {
	var in, out bytes.Buffer
	fin, fout := http2.NewFramer(&in, nil), http2.NewFramer(&out, nil)
	fin.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: make([]byte, 20), EndHeaders: true})
	fin.WriteData(1, true, make([]byte, 40))
	fout.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: make([]byte, 3), EndHeaders: true})
	fout.WriteData(1, false, make([]byte, 30))
	fout.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: make([]byte, 5), EndHeaders: true, EndStream: true})
	setID := func(p []byte, id uint32) {
		for len(p) >= 9 {
			binary.BigEndian.PutUint32(p[5:], id)
			p = p[9+(int(p[0])<<16|int(p[1])<<8|int(p[2])):]
		}
	}
	u := newUnreadConn(nil, new(atomic.Uint64), UnreadTimeout, newUnreadBudget(MaxUnreadTotal))
	u.in.skip = 0
	ib, ob := in.Bytes(), out.Bytes()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		id := uint32(2*i+1) & (1<<31 - 1)
		setID(ib, id)
		setID(ob, id)
		u.account(&u.in, ib, u.received)
		u.account(&u.out, ob, u.sent)
		// Envoy's windows: the connection's is topped up as it reads.
		u.window = 1 << 30
	}
	if len(u.streams) != 0 || u.started != 0 {
		b.Fatalf("%d streams, %d started after the calls, want none", len(u.streams), u.started)
	}
}

// TestUnreadTimeout: more than MaxUnreadAnswers answers waiting for
// window close the connection once they have waited the timeout on end,
// counted once; a window granted meanwhile that lets one through whole,
// so that those begun before the clock started fall to the bound, stops
// the clock, which starts anew when they are more again.
func TestUnreadTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = time.Second
		server, client := net.Pipe()
		defer client.Close()
		var closed atomic.Uint64
		u := newUnreadConn(server, &closed, timeout, newUnreadBudget(MaxUnreadTotal))
		u.in.skip = 0
		var in, out bytes.Buffer
		fin, fout := http2.NewFramer(&in, nil), http2.NewFramer(&out, nil)
		flush := func() {
			t.Helper()
			if u.account(&u.in, in.Bytes(), u.received) != nil || u.account(&u.out, out.Bytes(), u.sent) != nil {
				t.Fatal("connection closed before its timeout")
			}
			in.Reset()
			out.Reset()
		}
		// 101 answers begun, each with its window of 8 used up.
		fin.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 8})
		for i := range MaxUnreadAnswers + 1 {
			id := uint32(2*i + 1)
			fin.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: []byte("h"), EndHeaders: true})
			fout.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: []byte("h"), EndHeaders: true})
			fout.WriteData(id, false, make([]byte, 8))
		}
		flush()
		time.Sleep(timeout - time.Nanosecond)
		synctest.Wait()
		if closed.Load() != 0 {
			t.Fatalf("closed after %v of %d answers waiting, want not before %v", timeout-time.Nanosecond, MaxUnreadAnswers+1, timeout)
		}
		fin.WriteWindowUpdate(1, 8) // 1 gets its rest and trailers: 100 wait
		fout.WriteData(1, false, make([]byte, 8))
		fout.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte("t"), EndHeaders: true, EndStream: true})
		flush()
		time.Sleep(2 * timeout)
		synctest.Wait()
		if closed.Load() != 0 {
			t.Fatalf("closed with %d answers waiting, want kept", MaxUnreadAnswers)
		}
		id := uint32(2*(MaxUnreadAnswers+1) + 1) // 101 again
		fin.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: []byte("h"), EndHeaders: true})
		fout.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: []byte("h"), EndHeaders: true})
		fout.WriteData(id, false, make([]byte, 8))
		flush()
		time.Sleep(timeout)
		synctest.Wait()
		if closed.Load() != 1 {
			t.Fatalf("%d closings after %v of %d answers waiting, want 1", closed.Load(), timeout, MaxUnreadAnswers+1)
		}
		if _, err := client.Read(make([]byte, 1)); err == nil {
			t.Error("the client still reads the connection, want it closed")
		}
		if _, err := u.Write([]byte{0}); err != errUnread {
			t.Errorf("Write after the closing = %v, want errUnread", err)
		}
		u.Close()
		if closed.Load() != 1 {
			t.Errorf("%d closings counted, want 1", closed.Load())
		}
	})
}
