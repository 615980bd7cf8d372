package listener_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/metrics/metricstest"
)

// pipeListener hands out the server ends of in-memory connections, so an
// http.Server runs inside a synctest bubble on its fake clock.
type pipeListener struct {
	ch     chan net.Conn
	once   sync.Once
	closed chan struct{}
}

func newPipeListener() *pipeListener {
	return &pipeListener{ch: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

// dial connects a client; the server accepts it.
func (l *pipeListener) dial() net.Conn {
	s, c := net.Pipe()
	l.ch <- s
	return c
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// echoLen answers 200 with the body's length, or 408 when the body stalled.
var echoLen = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	n, err := io.Copy(io.Discard, r.Body)
	if errors.Is(err, listener.ErrBodyTimeout) {
		w.WriteHeader(http.StatusRequestTimeout)
		return
	}
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	fmt.Fprintf(w, "%d", n)
})

type fixture struct {
	ln  *pipeListener
	wl  *listener.Listener
	srv *http.Server
	reg *prometheus.Registry
}

func serve(t *testing.T, h http.Handler, o listener.Options) *fixture {
	t.Helper()
	reg := prometheus.NewRegistry()
	o.Metrics = metrics.New(reg)
	o.Name = "api"
	ln := newPipeListener()
	srv, wl := listener.Server(ln, h, o)
	go srv.Serve(wl)
	t.Cleanup(func() { srv.Close() })
	return &fixture{ln: ln, wl: wl, srv: srv, reg: reg}
}

// response reads one response from c in the background.
type response struct {
	done   chan struct{}
	status int
	body   string
	err    error
}

func readResponse(c net.Conn) *response {
	r := &response{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			r.err = err
			return
		}
		b, _ := io.ReadAll(resp.Body)
		r.status, r.body = resp.StatusCode, string(b)
	}()
	return r
}

func (r *response) ready() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

func metric(t *testing.T, f *fixture, name string) float64 {
	return metricstest.Gather(t, f.reg)[name+`{listener="api"}`]
}

// TestStalledBodyCut: a body that stops for body_read_timeout is cut — not
// a moment before — answered 408, its connection closed and counted.
func TestStalledBodyCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := serve(t, echoLen, listener.Options{BodyReadTimeout: 10 * time.Second, ReadHeaderTimeout: time.Minute})
		c := f.ln.dial()
		defer c.Close()
		resp := readResponse(c)
		io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
		time.Sleep(10*time.Second - time.Nanosecond)
		synctest.Wait()
		if resp.ready() {
			t.Fatalf("answer before body_read_timeout: %d %q %v", resp.status, resp.body, resp.err)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if !resp.ready() || resp.status != http.StatusRequestTimeout {
			t.Fatalf("after body_read_timeout: ready %v, status %d %v; want 408", resp.ready(), resp.status, resp.err)
		}
		// The connection is closed: nothing more can be read.
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Error("connection still open after a stalled body")
		}
		synctest.Wait()
		if got := metric(t, f, "sluice_body_timeouts_total"); got != 1 {
			t.Errorf("sluice_body_timeouts_total = %v, want 1", got)
		}
		if got := metric(t, f, "sluice_connections_closed_slow_total"); got != 1 {
			t.Errorf("sluice_connections_closed_slow_total = %v, want 1", got)
		}
		if got := metric(t, f, "sluice_connections_open"); got != 0 {
			t.Errorf("sluice_connections_open = %v, want 0", got)
		}
	})
}

// TestMovingUploadNotCut: an upload that never pauses as long as
// body_read_timeout goes through, though it lasts far longer in all.
func TestMovingUploadNotCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := serve(t, echoLen, listener.Options{BodyReadTimeout: 10 * time.Second})
		c := f.ln.dial()
		defer c.Close()
		resp := readResponse(c)
		const chunks, size = 60, 1000
		fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", chunks*size)
		for range chunks { // 60 chunks 9 s apart: 9 minutes in all
			time.Sleep(9 * time.Second)
			c.Write([]byte(strings.Repeat("x", size)))
		}
		synctest.Wait()
		<-resp.done
		if resp.status != 200 || resp.body != fmt.Sprint(chunks*size) {
			t.Fatalf("moving upload: %d %q %v; want 200 %d", resp.status, resp.body, resp.err, chunks*size)
		}
		if got := metric(t, f, "sluice_body_timeouts_total"); got != 0 {
			t.Errorf("sluice_body_timeouts_total = %v, want 0", got)
		}
		// The connection is reused: a second request on it answers too.
		resp = readResponse(c)
		io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
		<-resp.done
		if resp.status != 200 || resp.body != "3" {
			t.Errorf("second request on the connection: %d %q %v", resp.status, resp.body, resp.err)
		}
	})
}

// TestUnreadBodyBounded: a handler that answers without reading a stalled
// body does not leave the connection held: the server's discarding of the
// body is bounded by body_read_timeout too.
func TestUnreadBodyBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ignore := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTooManyRequests) })
		f := serve(t, ignore, listener.Options{BodyReadTimeout: 10 * time.Second})
		c := f.ln.dial()
		defer c.Close()
		resp := readResponse(c)
		io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
		time.Sleep(11 * time.Second)
		synctest.Wait()
		if !resp.ready() || resp.status != http.StatusTooManyRequests {
			t.Fatalf("answer to an unread stalled body: ready %v status %d %v; want 429", resp.ready(), resp.status, resp.err)
		}
		if got := f.wl.Open(); got != 0 {
			t.Errorf("%d connections open after the body stalled, want 0", got)
		}
	})
}

// TestSlowHeadersCounted: headers that do not come within
// read_header_timeout close the connection as slow; an idle keep-alive
// connection closed by idle_timeout is not slow.
func TestSlowHeadersCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := serve(t, echoLen, listener.Options{ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 20 * time.Second})
		slow := f.ln.dial()
		defer slow.Close()
		io.WriteString(slow, "GET / HTTP/1.1\r\nHost: x\r\n") // and never the blank line
		idle := f.ln.dial()
		defer idle.Close()
		resp := readResponse(idle)
		io.WriteString(idle, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		<-resp.done
		time.Sleep(time.Minute)
		synctest.Wait()
		if got := f.wl.Open(); got != 0 {
			t.Errorf("%d connections open, want 0 (both timed out)", got)
		}
		if got := metric(t, f, "sluice_connections_closed_slow_total"); got != 1 {
			t.Errorf("sluice_connections_closed_slow_total = %v, want 1 (the slow headers, not the idle connection)", got)
		}
	})
}

// TestMaxConnections: beyond the cap a connection is closed at once and
// counted; once one closes, a new one is served.
func TestMaxConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := serve(t, echoLen, listener.Options{MaxConnections: 3, ReadHeaderTimeout: time.Hour})
		var held []net.Conn
		for range 3 {
			c := f.ln.dial()
			io.WriteString(c, "GET / HTTP/1.1\r\n") // hold it: headers never end
			held = append(held, c)
		}
		synctest.Wait()
		extra := f.ln.dial()
		synctest.Wait()
		if _, err := extra.Read(make([]byte, 1)); err == nil {
			t.Error("a connection beyond max_connections was served")
		}
		extra.Close()
		if got := metric(t, f, "sluice_connections_refused_total"); got != 1 {
			t.Errorf("sluice_connections_refused_total = %v, want 1", got)
		}
		if got := metric(t, f, "sluice_connections_open"); got != 3 {
			t.Errorf("sluice_connections_open = %v, want 3", got)
		}
		held[0].Close()
		synctest.Wait()
		c := f.ln.dial()
		resp := readResponse(c)
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		<-resp.done
		if resp.status != 200 {
			t.Errorf("after one held connection closed: %d %v, want 200", resp.status, resp.err)
		}
		c.Close()
		for _, h := range held[1:] {
			h.Close()
		}
	})
}

// TestMaxConnectionsAnswered: with AnswerRefused, a connection beyond the
// cap is answered 503 {"error":"overloaded"} once its request's head has
// come, then closed, and counted; the held ones are not disturbed.
func TestMaxConnectionsAnswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := serve(t, echoLen, listener.Options{MaxConnections: 1, ReadHeaderTimeout: time.Hour, AnswerRefused: true})
		held := f.ln.dial()
		defer held.Close()
		io.WriteString(held, "GET / HTTP/1.1\r\n") // hold it: headers never end
		synctest.Wait()
		extra := f.ln.dial()
		defer extra.Close()
		resp := readResponse(extra)
		io.WriteString(extra, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		<-resp.done
		if resp.status != http.StatusServiceUnavailable || resp.body != `{"error":"overloaded"}`+"\n" {
			t.Errorf("a connection beyond max_connections: %d %q %v, want 503 {\"error\":\"overloaded\"}", resp.status, resp.body, resp.err)
		}
		if _, err := extra.Read(make([]byte, 1)); err == nil {
			t.Error("a connection beyond max_connections stayed open after its 503")
		}
		if got := metric(t, f, "sluice_connections_refused_total"); got != 1 {
			t.Errorf("sluice_connections_refused_total = %v, want 1", got)
		}
		if got := metric(t, f, "sluice_connections_open"); got != 1 {
			t.Errorf("sluice_connections_open = %v, want 1", got)
		}
		resp = readResponse(held)
		io.WriteString(held, "Host: x\r\n\r\n")
		<-resp.done
		if resp.status != 200 {
			t.Errorf("the held connection: %d %v, want 200", resp.status, resp.err)
		}
	})
}

// TestLongHandlerAfterBody: a handler that has read its whole body and
// then works for longer than body_read_timeout (a slow upstream) keeps
// its request context: the body's deadline is lifted once the body is
// read, so net/http's background read, which watches for the client going
// away, is not cut by it.
func TestLongHandlerAfterBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			select {
			case <-time.After(time.Minute):
				fmt.Fprint(w, "done")
			case <-r.Context().Done():
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		})
		f := serve(t, slow, listener.Options{BodyReadTimeout: 10 * time.Second})
		c := f.ln.dial()
		defer c.Close()
		resp := readResponse(c)
		io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
		<-resp.done
		if resp.status != 200 || resp.body != "done" {
			t.Fatalf("handler working a minute after its body: %d %q %v; want 200 done", resp.status, resp.body, resp.err)
		}
		if got := metric(t, f, "sluice_body_timeouts_total"); got != 0 {
			t.Errorf("sluice_body_timeouts_total = %v, want 0", got)
		}
	})
}

// TestPauseBetweenReads: the timeout bounds each wait for data, not the
// handler's work between two reads: a handler that pauses longer than
// body_read_timeout between reads of a body whose data then comes within
// the timeout is not cut; the body's next stall is.
func TestPauseBetweenReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pausing := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			buf := make([]byte, 5)
			if _, err := io.ReadFull(r.Body, buf); err != nil {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			time.Sleep(time.Minute) // work, not a wait for the client
			_, err := io.ReadFull(r.Body, buf)
			switch {
			case errors.Is(err, listener.ErrBodyTimeout):
				w.WriteHeader(http.StatusRequestTimeout)
			case err != nil:
				w.WriteHeader(http.StatusBadRequest)
			default:
				fmt.Fprintf(w, "%s", buf)
			}
		})
		f := serve(t, pausing, listener.Options{BodyReadTimeout: 10 * time.Second})
		c := f.ln.dial()
		defer c.Close()
		resp := readResponse(c)
		io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n01234")
		time.Sleep(time.Minute + 9*time.Second) // 9 s into the second read
		io.WriteString(c, "56789")
		<-resp.done
		if resp.status != 200 || resp.body != "56789" {
			t.Fatalf("data 9 s into a read after a pause of a minute: %d %q %v; want 200 56789", resp.status, resp.body, resp.err)
		}
		// The same, but the data never comes: cut 10 s into the read.
		c2 := f.ln.dial()
		defer c2.Close()
		resp = readResponse(c2)
		start := time.Now()
		io.WriteString(c2, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n01234")
		<-resp.done
		if resp.status != http.StatusRequestTimeout || time.Since(start) != time.Minute+10*time.Second {
			t.Fatalf("stalled second read: %d after %v; want 408 after 1m10s", resp.status, time.Since(start))
		}
	})
}

// TestStalledBodyCutExpectContinue: a body announced with Expect:
// 100-continue that stalls after the server's 100 Continue is cut too.
func TestStalledBodyCutExpectContinue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := serve(t, echoLen, listener.Options{BodyReadTimeout: 10 * time.Second, ReadHeaderTimeout: time.Minute})
		c := f.ln.dial()
		defer c.Close()
		io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 10\r\n\r\n")
		br := bufio.NewReader(c)
		line, err := br.ReadString('\n')
		if err != nil || !strings.Contains(line, " 100 ") {
			t.Fatalf("first answer line %q (%v), want 100 Continue", line, err)
		}
		br.ReadString('\n') // the blank line ending the interim answer
		io.WriteString(c, "01234")
		start := time.Now()
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusRequestTimeout || time.Since(start) != 10*time.Second {
			t.Fatalf("stalled body after 100 Continue: %d after %v, want 408 after 10s", resp.StatusCode, time.Since(start))
		}
	})
}
