package server

import (
	"bytes"
	"net"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/net/http2"
)

// TestUnreadIdleStreams: streaming calls whose answer messages were sent
// whole (a health Watch after its status, reflection between requests)
// do not wait for window, even when the connection's window runs out:
// a client with 101 of them open, whose connection window another
// answer used up, is kept (it was closed after the unread timeout, the
// 101 left in the clock's backlog until they ended, which they need
// never do). A client that sends on them (a request, whose answer may
// then wait unseen) has them count again, and is closed if their
// answers, with its window, stay out for the timeout.
func TestUnreadIdleStreams(t *testing.T) {
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
				t.Fatal("connection closed")
			}
			in.Reset()
			out.Reset()
		}
		fin.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
		const streams = MaxUnreadAnswers + 1
		for i := range streams {
			id := uint32(2*i + 1)
			fin.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: []byte("h"), EndHeaders: true})
			fin.WriteData(id, true, make([]byte, 7))
			fout.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: []byte("h"), EndHeaders: true})
			fout.WriteData(id, false, make([]byte, 10)) // a message, whole
		}
		flush()
		// Another call's answer uses up the connection's window.
		big := uint32(2*streams + 1)
		fin.WriteHeaders(http2.HeadersFrameParam{StreamID: big, BlockFragment: []byte("h"), EndHeaders: true})
		fout.WriteHeaders(http2.HeadersFrameParam{StreamID: big, BlockFragment: []byte("h"), EndHeaders: true})
		for left := u.window; left > 0; left -= 1 << 14 {
			fout.WriteData(big, false, make([]byte, min(left, 1<<14)))
		}
		flush()
		if u.window != 0 {
			t.Fatalf("connection window %d, want 0", u.window)
		}
		time.Sleep(2 * timeout)
		synctest.Wait()
		if closed.Load() != 0 {
			t.Fatalf("closed with %d streaming calls idle, their messages sent whole, and one answer waiting", streams)
		}
		// A request on each: their answers may wait unseen, behind the
		// connection's window: they count, and the clock runs out.
		for i := range streams {
			fin.WriteData(uint32(2*i+1), false, make([]byte, 7))
		}
		flush()
		time.Sleep(timeout)
		synctest.Wait()
		if closed.Load() != 1 {
			t.Fatalf("%d closings after %v of %d calls sent a request with no window, want 1", closed.Load(), timeout, streams)
		}
		u.Close()
	})
}
