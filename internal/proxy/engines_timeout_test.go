package proxy_test

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/listener"
)

// metric returns the value of the counter or gauge name{listener="proxy"}
// in s's registry (0 when absent).
func (s *eserved) metric(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := s.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "listener" && lp.GetValue() == "proxy" {
					if c := m.GetCounter(); c != nil {
						return c.GetValue()
					}
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}

// eventually polls cond until it holds, failing after safety: for what a
// client cannot see happen (a count after a close).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(safety)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, safety)
		}
		time.Sleep(time.Millisecond)
	}
}

// closedUnanswered reads c until it closes; it fails if an answer (any
// byte) comes or the connection stays open past safety.
func closedUnanswered(t *testing.T, c net.Conn, what string) {
	t.Helper()
	b, err := io.ReadAll(c)
	if len(b) > 0 {
		t.Errorf("%s: got %q, want the connection closed unanswered", what, b)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Errorf("%s: the connection stayed open", what)
	}
}

// Slow clients on every HTTP/1.1 engine, with read_header_timeout of
// 500ms (which bounds a TLS handshake too): a connection that sends nothing (on TLS: no handshake) is
// closed unanswered, one that sends its head a byte at a time and never
// ends it (slowloris) is closed too; both are counted slow, and the
// upstream sees nothing.
func TestEngineSlowHeaders(t *testing.T) {
	forEngine(t, true, func(t *testing.T, ec engineCase) {
		rec := newRecorder(t, nil)
		s := startOn(t, ec, rec.srv.URL, engineOpts{lis: listener.Options{ReadHeaderTimeout: 500 * time.Millisecond}})

		c := s.dial(t)
		silent, err := net.Dial("tcp", s.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer silent.Close()
		silent.SetDeadline(time.Now().Add(safety))
		silentDone := make(chan struct{})
		go func() { defer close(silentDone); closedUnanswered(t, silent, "a connection that sends nothing") }()

		done := make(chan struct{})
		go func() {
			defer close(done)
			tick := time.NewTicker(10 * time.Millisecond) // the client's pace, not a wait for the proxy
			defer tick.Stop()
			head := "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 1<<20)
			for i := 0; i < len(head); i++ {
				if _, err := io.WriteString(c, head[i:i+1]); err != nil {
					return
				}
				<-tick.C
			}
		}()
		// net/http answers 400 when the deadline cuts a header line
		// before its colon (textproto's "malformed MIME header line"
		// hides the timeout); the front closes unanswered.
		b, err := io.ReadAll(c)
		if len(b) > 0 && !strings.HasPrefix(string(b), "HTTP/1.1 400 ") {
			t.Errorf("a head sent a byte at a time: got %q, want the connection closed (at most with 400)", b)
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Error("a head sent a byte at a time: the connection stayed open")
		}
		c.Close()
		<-done
		<-silentDone
		eventually(t, "both connections counted slow", func() bool {
			return s.metric(t, "sluice_connections_closed_slow_total") == 2
		})
		if n := rec.count(); n != 0 {
			t.Errorf("the upstream saw %d requests, want 0", n)
		}
	})
}

// An idle keep-alive connection closes after idle_timeout, on every
// HTTP/1.1 engine, and is not counted slow.
func TestEngineIdleTimeout(t *testing.T) {
	forEngine(t, true, func(t *testing.T, ec engineCase) {
		for _, pa := range paths {
			t.Run(pa.name, func(t *testing.T) {
				rec := newRecorder(t, nil)
				s := startOn(t, ec, rec.srv.URL, engineOpts{lis: listener.Options{IdleTimeout: 100 * time.Millisecond}})
				c := s.dial(t)
				io.WriteString(c, pa.method+" / HTTP/1.1\r\nHost: x\r\nContent-Length: "+strconv.Itoa(len(pa.body))+"\r\n\r\n"+pa.body)
				br := bufio.NewReader(c)
				resp, err := http.ReadResponse(br, nil)
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("answer: %v %v", resp, err)
				}
				io.ReadAll(resp.Body)
				if b, err := io.ReadAll(br); len(b) != 0 || err != nil {
					t.Errorf("idle connection: %q %v, want it closed", b, err)
				}
				eventually(t, "the connection counted out", func() bool { return s.ln.Open() == 0 })
				if n := s.metric(t, "sluice_connections_closed_slow_total"); n != 0 {
					t.Errorf("an idle connection closed counted slow (%v)", n)
				}
			})
		}
	})
}

// A request body that stalls for body_read_timeout answers 408
// request_timeout on every engine (HTTP/2 too) and abandons the upstream
// request, which never gets the body whole.
func TestEngineStalledBody(t *testing.T) {
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		upErr := make(chan error, 1)
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, err := io.Copy(io.Discard, r.Body)
			upErr <- err
		}))
		t.Cleanup(up.Close)
		s := startOn(t, ec, up.URL, engineOpts{lis: listener.Options{BodyReadTimeout: 100 * time.Millisecond}})
		pr, pw := io.Pipe()
		t.Cleanup(func() { pw.Close() })
		go pw.Write([]byte("the first bytes, and then nothing"))
		req := request(t, s, "POST", "/upload", "")
		req.Body, req.ContentLength = pr, 100_000
		resp, body := s.do(t, req)
		s.wantProto(t, resp)
		if resp.StatusCode != 408 || body != "{\"error\":\"request_timeout\"}\n" {
			t.Errorf("stalled body: %d %q, want 408 request_timeout", resp.StatusCode, body)
		}
		select {
		case err := <-upErr:
			if err == nil {
				t.Error("the upstream read the whole body of a stalled upload")
			}
		case <-time.After(safety):
			t.Fatal("the upstream request of a stalled upload was not abandoned")
		}
		if n := s.metric(t, "sluice_body_timeouts_total"); n != 1 {
			t.Errorf("sluice_body_timeouts_total %v, want 1", n)
		}
	})
}

// max_connections on every engine: with one connection held (kept alive
// by the client, or an HTTP/2 connection), one more is closed at once
// unanswered and counted refused; once the first closes, its slot serves
// the next.
func TestEngineMaxConnections(t *testing.T) {
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		rec := newRecorder(t, nil)
		s := startOn(t, ec, rec.srv.URL, engineOpts{lis: listener.Options{MaxConnections: 1}})
		if resp, _ := s.do(t, request(t, s, "GET", "/held", "")); resp.StatusCode != 200 {
			t.Fatalf("first request: %d", resp.StatusCode)
		}
		if s.ln.Open() != 1 {
			t.Fatalf("open connections %d, want the client's kept-alive one", s.ln.Open())
		}
		extra, err := net.Dial("tcp", s.Addr)
		if err != nil {
			t.Fatal(err)
		}
		extra.SetDeadline(time.Now().Add(safety))
		io.WriteString(extra, "GET /extra HTTP/1.1\r\nHost: x\r\n\r\n")
		closedUnanswered(t, extra, "a connection over max_connections")
		extra.Close()
		if n := s.metric(t, "sluice_connections_refused_total"); n != 1 {
			t.Errorf("sluice_connections_refused_total %v, want 1", n)
		}
		s.client.CloseIdleConnections()
		eventually(t, "the kept-alive connection counted out", func() bool { return s.ln.Open() == 0 })
		if resp, _ := s.do(t, request(t, s, "GET", "/next", "")); resp.StatusCode != 200 {
			t.Errorf("after the first connection closed: %d, want 200", resp.StatusCode)
		}
		if n := rec.count(); n != 2 {
			t.Errorf("upstream got %d requests, want 2 (not the refused connection's)", n)
		}
	})
}

// A connection's slot is given back before its close can be seen: a
// client that connects again as soon as the server closed its connection
// (Connection: close; on the front or handed off to net/http) is served,
// even at max_connections. On TLS the close can be seen at the
// close_notify alert, which goes out before the socket is closed: the
// slot is given back before the alert.
func TestReconnectAfterCloseServed(t *testing.T) {
	for _, ec := range []engineCase{engineCases[0], engineCases[2]} { // plaintext, TLS HTTP/1.1
		t.Run(ec.name, func(t *testing.T) {
			rec := newRecorder(t, nil)
			s := startOn(t, ec, rec.srv.URL, engineOpts{lis: listener.Options{MaxConnections: 1}})
			tries := 1000
			if ec.tls {
				tries = 300 // a handshake each
			}
			refused := 0
			for i := range tries {
				head := []string{"GET / HTTP/1.1\r\n", "POST / HTTP/1.1\r\nContent-Length: 0\r\n"}[i%2] // the front, net/http
				c, err := net.Dial("tcp", s.Addr)
				if err != nil {
					t.Fatal(err)
				}
				c.SetDeadline(time.Now().Add(safety))
				if ec.tls {
					cfg := s.tlsCfg.Clone()
					cfg.NextProtos = []string{"http/1.1"}
					c = tls.Client(c, cfg)
				}
				io.WriteString(c, head+"Host: x\r\nConnection: close\r\n\r\n")
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					refused++
				} else if b, err := io.ReadAll(resp.Body); err != nil || string(b) != "ok" {
					t.Fatalf("answer %d: %q %v", i, b, err)
				}
				io.Copy(io.Discard, c) // to the server's close (its close_notify on TLS)
				c.Close()
			}
			if refused > 0 {
				t.Errorf("%d of %d connections made right after the last one closed were refused", refused, tries)
			}
		})
	}
}

// A client that stops reading its answer on every HTTP/1.x engine, with
// send_timeout of 200ms: its connection is cut and counted slow, and the
// upstream request is abandoned (the upstream's writes fail), instead of
// the connection, the handler and the upstream connection being held for
// as long as the client likes.
func TestEngineStalledReader(t *testing.T) {
	forEngine(t, true, func(t *testing.T, ec engineCase) {
		up, upDone := downloadUpstream(t)
		s := startOn(t, ec, up.URL, engineOpts{lis: listener.Options{SendTimeout: 200 * time.Millisecond}})
		c := s.dial(t)
		io.WriteString(c, "GET /download HTTP/1.1\r\nHost: x\r\n\r\n")
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 {
			t.Fatalf("status %d, want 200", resp.StatusCode)
		}
		// Read nothing more: the answer backs up into the proxy.
		select {
		case err := <-upDone:
			if err == nil {
				t.Fatal("the upstream wrote 256 MiB to a client that reads nothing")
			}
		case <-time.After(safety):
			t.Fatal("a client that stopped reading still holds its upstream request after send_timeout")
		}
		eventually(t, "the stalled reader counted slow", func() bool {
			return s.metric(t, "sluice_connections_closed_slow_total") == 1
		})
		if _, err := io.Copy(io.Discard, resp.Body); err == nil {
			t.Error("the answer to a stalled reader ended as if whole")
		}
	})
}

// A client that stops reading one HTTP/2 stream's answer: flow control
// stalls the stream, not the connection, so the socket never backs up;
// after send_timeout the stream is reset and its upstream request
// abandoned, while the connection serves other streams.
func TestEngineStalledReaderH2(t *testing.T) {
	forH2(t, func(t *testing.T, ec engineCase) {
		up, upDone := downloadUpstream(t)
		s := startOn(t, ec, up.URL, engineOpts{lis: listener.Options{SendTimeout: 200 * time.Millisecond}})
		resp, err := s.client.Do(request(t, s, "GET", "/download", ""))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		s.wantProto(t, resp)
		// Read nothing of the body: the stream's window fills.
		select {
		case err := <-upDone:
			if err == nil {
				t.Fatal("the upstream wrote 256 MiB to a stream nobody reads")
			}
		case <-time.After(safety):
			t.Fatal("a stream nobody reads still holds its upstream request after send_timeout")
		}
		if _, err := io.Copy(io.Discard, resp.Body); err == nil {
			t.Error("the answer of a reset stream ended as if whole")
		}
		// The connection still serves.
		resp2, body := s.do(t, request(t, s, "GET", "/other", ""))
		if resp2.StatusCode != 200 || body != "small" {
			t.Errorf("another stream after the reset: %d %q", resp2.StatusCode, body)
		}
	})
}

// forH2 runs f on the engines clients reach over HTTP/2.
func forH2(t *testing.T, f func(t *testing.T, ec engineCase)) {
	for _, ec := range engineCases {
		if ec.h2 {
			t.Run(ec.name, func(t *testing.T) { f(t, ec) })
		}
	}
}

// downloadUpstream is an upstream that answers /download with 256 MiB in
// 32 KiB writes, reporting on done the error its writes ended with (nil:
// all written), and any other path with "small".
func downloadUpstream(t *testing.T) (*httptest.Server, <-chan error) {
	done := make(chan error, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/download" {
			io.WriteString(w, "small")
			return
		}
		chunk := make([]byte, 32<<10)
		var err error
		for n := 0; n < 256<<20 && err == nil; n += len(chunk) {
			_, err = w.Write(chunk)
		}
		done <- err
	}))
	t.Cleanup(up.Close)
	return up, done
}
