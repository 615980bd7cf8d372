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

// TestUnreadTrickle: a client that grants a little window now and then
// (a byte of the connection's window, or a byte to each of enough calls
// to bring those waiting to the bound for a moment) has the server send
// that much, and its answers wait again: progress too slow to drain the
// backlog does not stop the clock, and the connection is closed once the
// answers have waited the timeout. The clock used to stop whenever the
// count of answers waiting fell to the bound, which a byte of window did
// between its WINDOW_UPDATE and the server's DATA, so that a byte every
// few seconds kept the connection (and its 1,000 answers) indefinitely.
func TestUnreadTrickle(t *testing.T) {
	for _, c := range []struct {
		name    string
		window  uint32 // the client's initial window per call
		answers int
		// trickle writes the client's grant and the server's answer to it.
		trickle func(fin, fout *http2.Framer, round int)
	}{
		{"connection window", 1 << 20, MaxUnreadAnswers + 1, func(fin, fout *http2.Framer, round int) {
			fin.WriteWindowUpdate(0, 1)
			fout.WriteData(uint32(2*(round%(MaxUnreadAnswers+1))+1), false, []byte{0})
		}},
		{"call windows", 8, 2 * MaxUnreadAnswers, func(fin, fout *http2.Framer, round int) {
			// A byte to each of MaxUnreadAnswers calls: the bound wait.
			for i := range MaxUnreadAnswers {
				id := uint32(2*((round+i)%(2*MaxUnreadAnswers)) + 1)
				fin.WriteWindowUpdate(id, 1)
			}
			for i := range MaxUnreadAnswers {
				id := uint32(2*((round+i)%(2*MaxUnreadAnswers)) + 1)
				fout.WriteData(id, false, []byte{0})
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const timeout = time.Second
				server, client := net.Pipe()
				defer client.Close()
				var closed atomic.Uint64
				u := newUnreadConn(server, &closed, timeout, newUnreadBudget(MaxUnreadTotal))
				u.in.skip = 0
				defer u.Close()
				var in, out bytes.Buffer
				fin, fout := http2.NewFramer(&in, nil), http2.NewFramer(&out, nil)
				// flush accounts the client's frames, then the server's, as
				// they pass in turn; it reports whether the connection was
				// closed.
				flush := func() bool {
					over := u.account(&u.in, in.Bytes(), u.received) != nil
					in.Reset()
					over = u.account(&u.out, out.Bytes(), u.sent) != nil || over
					out.Reset()
					return over
				}
				fin.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: c.window})
				for i := range c.answers {
					id := uint32(2*i + 1)
					fin.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: []byte("h"), EndHeaders: true})
					fout.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: []byte("h"), EndHeaders: true})
					data := int(c.window)
					if c.window > defaultWindow {
						data = 0
					}
					fout.WriteData(id, false, make([]byte, data))
				}
				// With large call windows, the connection's is used up.
				for left := int(u.window); c.window > defaultWindow && left > 0; left -= 1 << 14 {
					fout.WriteData(1, false, make([]byte, min(left, 1<<14)))
				}
				flush()
				rounds := 0
				for ; rounds < 100 && closed.Load() == 0; rounds++ {
					time.Sleep(timeout / 10)
					c.trickle(fin, fout, rounds)
					flush()
					synctest.Wait()
				}
				if closed.Load() != 1 {
					t.Fatalf("%d answers waiting, granted a trickle of window every %v: %d closings after %d rounds (%v), want 1 after %v",
						c.answers, timeout/10, closed.Load(), rounds, time.Duration(rounds)*timeout/10, timeout)
				}
				if rounds > 11 {
					t.Errorf("closed after %d rounds of %v, want at %v", rounds, timeout/10, timeout)
				}
			})
		})
	}
}
