package server_test

import (
	"bufio"
	"crypto/tls"
	"net"
	"runtime"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
	"github.com/sluicehq/sluice/memstore"
)

// unread is what became of the calls of a client that reads none of its
// answers.
type unread struct {
	begun   int  // answers begun (their HEADERS came)
	held    int  // of them, those whose rest waits for a window
	refused int  // calls reset by the server (REFUSED_STREAM)
	closed  bool // the server closed the connection
}

// sendUnread opens a connection to env's gRPC listener granting a
// flow-control window of window bytes per call (and the connection's
// 65,535), sends n rate limit calls, and reads frames until each call
// has an answer's HEADERS (with settle, its end), a reset, or the
// connection ends: it never grants more window, so no answer goes
// further than window bytes. The connection stays open (unless the
// server closed it) until t ends.
func sendUnread(t *testing.T, env *rlsEnv, window uint32, n int, settle bool) unread {
	return sendUnreadTLS(t, env, nil, window, n, settle)
}

// sendUnreadTLS is sendUnread over TLS with conf (nil: plaintext).
func sendUnreadTLS(t *testing.T, env *rlsEnv, conf *tls.Config, window uint32, n int, settle bool) unread {
	t.Helper()
	c, err := net.Dial("tcp", env.conn.Target())
	if err != nil {
		t.Fatal(err)
	}
	if conf != nil {
		conf = conf.Clone()
		conf.NextProtos = []string{"h2"}
		c = tls.Client(c, conf)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(time.Minute)) // a hang guard, not a measure
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	bw := bufio.NewWriter(c)
	fr := http2.NewFramer(bw, c)
	if err := fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: window}); err != nil {
		t.Fatal(err)
	}
	block := callBlock()
	body := requestBody(t)
	// A write error is the server's closing the connection: what it
	// sent before is read below.
	for i := range n {
		id := uint32(2*i + 1)
		if fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndHeaders: true}) != nil || fr.WriteData(id, true, body) != nil {
			break
		}
	}
	bw.Flush()
	verdict := map[uint32]bool{} // stream: answer begun, not ended
	var u unread
	open := 0 // answers begun, not ended
	for len(verdict) < n || settle && open > 0 {
		f, err := fr.ReadFrame()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("%d of %d calls with neither an answer nor a reset after a minute", n-len(verdict), n)
			}
			u.closed = true
			break
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
				bw.Flush()
			}
		case *http2.HeadersFrame:
			if !f.StreamEnded() {
				u.begun++
				open++
			} else if verdict[f.StreamID] {
				open--
			}
			verdict[f.StreamID] = !f.StreamEnded()
		case *http2.RSTStreamFrame:
			if verdict[f.StreamID] {
				open--
			}
			verdict[f.StreamID] = false
			if f.ErrCode == http2.ErrCodeRefusedStream {
				u.refused++
			}
		}
	}
	for _, h := range verdict {
		if h && !u.closed {
			u.held++
		}
	}
	return u
}

// heap returns the bytes of live heap, after a collection, and the
// goroutines.
func heap() (uint64, int) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc, runtime.NumGoroutine()
}

// TestGRPCUnreadAnswers: clients that send calls and read none of the
// answers (they grant a window of a few bytes per call, and never more).
// Each answer the server started waits in memory for a window; the
// server keeps server.MaxUnreadAnswers of them on a connection, and
// closes a connection that holds more for the unread timeout (shortened
// here). Without the bound a connection held DefaultMaxConcurrentStreams
// (1,000) of them, about 3 MB, until its age, across up to
// grpc.max_connections connections.
func TestGRPCUnreadAnswers(t *testing.T) {
	const conns = 4
	env := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{grpc: server.GRPCOptions{MaxCalls: 10_000, UnreadTimeout: 100 * time.Millisecond}})
	h0, g0 := heap()
	for range conns {
		u := sendUnread(t, env, 8, server.MaxUnreadAnswers, false)
		if u.closed || u.held != server.MaxUnreadAnswers {
			t.Errorf("%d calls not read: %d answers held, connection closed %v; want all held, the connection open", server.MaxUnreadAnswers, u.held, u.closed)
		}
	}
	h1, g1 := heap()
	t.Logf("%d connections holding %d unread answers each: %d KB of heap a connection (%d bytes an answer), %d goroutines a connection",
		conns, server.MaxUnreadAnswers, (h1-h0)/conns>>10, (h1-h0)/conns/server.MaxUnreadAnswers, (g1-g0)/conns)

	// Past the bound, the connection is closed once the timeout passes
	// (the reads wait for it), having held at most its stream cap.
	const n = server.DefaultMaxConcurrentStreams + 100
	u := sendUnread(t, env, 8, n, true)
	t.Logf("%d calls not read on one connection: %d answers begun, %d refused, closed %v", n, u.begun, u.refused, u.closed)
	if !u.closed {
		t.Errorf("a connection holding %d unread answers is kept; want it closed past %d", u.held, server.MaxUnreadAnswers)
	}
	if u.begun > server.DefaultMaxConcurrentStreams {
		t.Errorf("%d answers begun on a connection that reads none, want at most %d", u.begun, server.DefaultMaxConcurrentStreams)
	}
	if got := env.grpc.ClosedUnread(); got != 1 {
		t.Errorf("ClosedUnread() = %d, want 1", got)
	}

	// A client whose windows let its answers through keeps its
	// connection with 1,000 calls in flight.
	u = sendUnread(t, env, 1<<16-1, server.DefaultMaxConcurrentStreams, true)
	if u.closed || u.begun != server.DefaultMaxConcurrentStreams || u.held != 0 {
		t.Errorf("%d calls whose answers fit the windows: %d answers begun, %d held, connection closed %v; want all answered, the connection open",
			server.DefaultMaxConcurrentStreams, u.begun, u.held, u.closed)
	}
}

// TestGRPCUnreadAnswersTLS: over TLS the account reads the HTTP/2 frames
// TLS carries: a client that reads none of its answers is closed past the
// bound, one whose windows let its answers through keeps its connection.
func TestGRPCUnreadAnswersTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "server")
	env := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{grpc: server.GRPCOptions{
		TLS: &tls.Config{Certificates: []tls.Certificate{ca.Server(t).TLS}}, MaxCalls: 10_000, UnreadTimeout: 100 * time.Millisecond,
	}})
	if u := sendUnreadTLS(t, env, ca.ClientConfig(), 8, server.MaxUnreadAnswers+1, true); !u.closed || u.begun != server.MaxUnreadAnswers+1 {
		t.Errorf("%d calls not read over TLS: %d answers begun, connection closed %v; want all begun, then the connection closed", server.MaxUnreadAnswers+1, u.begun, u.closed)
	}
	if got := env.grpc.ClosedUnread(); got != 1 {
		t.Errorf("ClosedUnread() = %d, want 1", got)
	}
	if u := sendUnreadTLS(t, env, ca.ClientConfig(), 1<<16-1, server.DefaultMaxConcurrentStreams, true); u.closed || u.begun != server.DefaultMaxConcurrentStreams || u.held != 0 {
		t.Errorf("%d calls whose answers fit the windows, over TLS: %d answers begun, %d held, connection closed %v; want all answered, the connection open",
			server.DefaultMaxConcurrentStreams, u.begun, u.held, u.closed)
	}
}
