package server_test

import (
	"bufio"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/memstore"
)

// unreadClient is a raw HTTP/2 client of env's gRPC listener that grants
// each call a fixed window and the connection nothing past its initial
// 65,535 bytes, unless told to.
type unreadClient struct {
	t     *testing.T
	c     net.Conn
	bw    *bufio.Writer
	fr    *http2.Framer
	calls int // calls sent: stream ids 1, 3, …
}

// dialUnread opens an unreadClient granting window bytes to each call.
func dialUnread(t *testing.T, env *rlsEnv, window uint32) *unreadClient {
	t.Helper()
	c, err := net.Dial("tcp", env.conn.Target())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(time.Minute)) // a hang guard, not a measure
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	bw := bufio.NewWriter(c)
	u := &unreadClient{t: t, c: c, bw: bw, fr: http2.NewFramer(bw, c)}
	if err := u.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: window}); err != nil {
		t.Fatal(err)
	}
	return u
}

// begin sends n rate limit calls and reads frames until each has its
// answer's HEADERS and first DATA (so that the server has accounted the
// window that DATA used); it returns the read error that ended the
// connection before then, if it ended.
func (u *unreadClient) begin(n int) error {
	u.t.Helper()
	block, body := callBlock(), requestBody(u.t)
	for range n {
		id := uint32(2*u.calls + 1)
		u.calls++
		if err := u.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndHeaders: true}); err != nil {
			return err
		}
		if err := u.fr.WriteData(id, true, body); err != nil {
			return err
		}
	}
	if err := u.bw.Flush(); err != nil {
		return err
	}
	begun, data := map[uint32]bool{}, map[uint32]bool{}
	for len(begun) < n || len(data) < n {
		f, err := u.read()
		if err != nil {
			return err
		}
		switch f := f.(type) {
		case *http2.HeadersFrame:
			if f.StreamEnded() {
				u.t.Fatalf("call %d ended, want its answer waiting", f.StreamID)
			}
			begun[f.StreamID] = true
		case *http2.DataFrame:
			data[f.StreamID] = true
		case *http2.RSTStreamFrame:
			u.t.Fatalf("call %d reset, want its answer begun", f.StreamID)
		}
	}
	return nil
}

// read reads a frame, acknowledging the server's SETTINGS.
func (u *unreadClient) read() (http2.Frame, error) {
	f, err := u.fr.ReadFrame()
	if err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			u.t.Fatal("no frame for a minute")
		}
		return nil, err
	}
	if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
		u.fr.WriteSettingsAck()
		u.bw.Flush()
	}
	return f, nil
}

// grant grants a byte of window to each call of ids and reads frames
// until the server has sent each its byte (or ended its answer); it
// returns the read error that ended the connection meanwhile, if it
// ended.
func (u *unreadClient) grant(ids []uint32) error {
	u.t.Helper()
	want := map[uint32]bool{}
	for _, id := range ids {
		want[id] = true
		if err := u.fr.WriteWindowUpdate(id, 1); err != nil {
			return err
		}
	}
	if err := u.bw.Flush(); err != nil {
		return err
	}
	for len(want) > 0 {
		f, err := u.read()
		if err != nil {
			return err
		}
		switch f := f.(type) {
		case *http2.DataFrame:
			if len(f.Data()) > 0 {
				delete(want, f.StreamID)
			}
		case *http2.HeadersFrame:
			delete(want, f.StreamID)
		case *http2.RSTStreamFrame:
			delete(want, f.StreamID)
		}
	}
	return nil
}

// TestGRPCUnreadTrickle: a client that leaves MaxUnreadAnswers+1 answers
// waiting for window and, every tenth of the unread timeout, grants a
// byte of window to one of them in turn (so that for a moment only the
// bound wait, until the server has sent that byte) is closed once its
// answers have waited the timeout: too slow to drain them, that progress
// does not stop the clock. It used to: the connection was kept, and its
// answers held, for as long as the client went on.
func TestGRPCUnreadTrickle(t *testing.T) {
	const timeout = 200 * time.Millisecond
	env := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{grpc: server.GRPCOptions{MaxCalls: 10_000, UnreadTimeout: timeout}})
	const answers = server.MaxUnreadAnswers + 1
	u := dialUnread(t, env, 8)
	if err := u.begin(answers); err != nil {
		t.Fatalf("%d calls: %v before their answers began", answers, err)
	}
	// A generous bound on the rounds (each answer gets a byte at most):
	// the clock fires after about ten.
	const maxRounds = answers - 1
	rounds := 0
	var err error
	for ; rounds < maxRounds && err == nil; rounds++ {
		time.Sleep(timeout / 10) // the trickle's pace, not a synchronisation
		err = u.grant([]uint32{uint32(2*rounds + 1)})
	}
	t.Logf("%d rounds of a byte to one of %d calls every %v: read error %v", rounds, answers, timeout/10, err)
	if err == nil {
		t.Errorf("%d answers waiting, a byte of window to one of them every %v: kept after %d rounds, want closed after %v",
			answers, timeout/10, maxRounds, timeout)
	}
	if got := env.grpc.ClosedUnread(); got != 1 {
		t.Errorf("ClosedUnread() = %d, want 1", got)
	}
}

// alive sends a PING and reads frames until its ACK: it returns the read
// error that ended the connection before, if it ended.
func (u *unreadClient) alive() error {
	if err := u.fr.WritePing(false, [8]byte{'u', 'n', 'r', 'e', 'a', 'd'}); err != nil {
		return err
	}
	if err := u.bw.Flush(); err != nil {
		return err
	}
	for {
		f, err := u.read()
		if err != nil {
			return err
		}
		if p, ok := f.(*http2.PingFrame); ok && p.IsAck() {
			return nil
		}
	}
}
