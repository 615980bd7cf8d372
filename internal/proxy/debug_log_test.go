package proxy_test

import (
	"bufio"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/logtest"
	"github.com/sluicehq/sluice/internal/proxy"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestStalledBodiesLogOnceASecond: at log_level debug, the bodies that
// stall past body_read_timeout are logged at most once a second, with how
// many went unlogged, on every engine: each wrote a line, so a client
// could make the daemon write one line per request it let stall.
func TestStalledBodiesLogOnceASecond(t *testing.T) {
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
		t.Cleanup(up.Close)
		var out redistest.SyncBuffer
		var clock atomic.Int64
		clock.Store(time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC).UnixNano())
		s := startOn(t, ec, up.URL, engineOpts{
			lis: listener.Options{BodyReadTimeout: 50 * time.Millisecond},
			proxy: proxy.Options{
				Logger: slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug})),
				Now:    func() time.Time { return time.Unix(0, clock.Load()) },
			},
		})
		stall := func() {
			t.Helper()
			pr, pw := io.Pipe()
			defer pw.Close()
			go pw.Write([]byte("the first bytes, and then nothing"))
			req := request(t, s, "POST", "/upload", "")
			req.Body, req.ContentLength = pr, 100_000
			if resp, body := s.do(t, req); resp.StatusCode != http.StatusRequestTimeout {
				t.Fatalf("stalled body: %d %q, want 408", resp.StatusCode, body)
			}
		}
		logtest.OncePerSecond(t, "stalled bodies", "client body stalled", 5, out.Lines, stall, func() { clock.Add(int64(time.Second)) })
	})
}

// TestUnreadableBodiesLogOnceASecond: at log_level debug, the bodies that
// cannot be read (a malformed chunked encoding) are logged at most once a
// second, with how many went unlogged, on every HTTP/1.1 engine.
func TestUnreadableBodiesLogOnceASecond(t *testing.T) {
	forEngine(t, true, func(t *testing.T, ec engineCase) {
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
		t.Cleanup(up.Close)
		var out redistest.SyncBuffer
		var clock atomic.Int64
		clock.Store(time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC).UnixNano())
		s := startOn(t, ec, up.URL, engineOpts{proxy: proxy.Options{
			Logger: slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug})),
			Now:    func() time.Time { return time.Unix(0, clock.Load()) },
		}})
		bad := func() {
			t.Helper()
			c := s.dial(t)
			io.WriteString(c, "POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabcde\r\nzz\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil || resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("malformed chunked body: %v %v, want 400", resp, err)
			}
			c.Close()
		}
		logtest.OncePerSecond(t, "unreadable bodies", "client body unreadable", 5, out.Lines, bad, func() { clock.Add(int64(time.Second)) })
	})
}
