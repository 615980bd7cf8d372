package proxy_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/logtest"
	"github.com/sluicehq/sluice/internal/proxy"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/rules"
)

// TestUpstreamErrorsLogOnceASecond: a failing upstream is logged at most
// once a second, with how many failures went unlogged, and a line carries
// a bounded piece of the path: a client's requests while the upstream is
// down once each wrote a line with their whole path (up to 1 MiB, twice:
// the path, and the URL in the error).
func TestUpstreamErrorsLogOnceASecond(t *testing.T) {
	up := newUpstream(t)
	up.srv.Close()
	up.srv.URL = "http://" + refusedAddr(t)
	var clock atomic.Int64
	t0 := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	clock.Store(t0.UnixNano())
	var out redistest.SyncBuffer
	f := start(t, setup{specs: []rules.Spec{{Name: "r", Rate: "1000/s"}}, up: up,
		log: slog.New(slog.NewTextHandler(&out, nil)), now: func() time.Time { return time.Unix(0, clock.Load()) }})
	path := "/" + strings.Repeat("p", 4<<10)
	for range 20 {
		if resp, _ := get(t, f.proxy.URL+path, nil); resp.StatusCode != 502 {
			t.Fatalf("upstream down: %d, want 502", resp.StatusCode)
		}
	}
	if lines := out.Lines(); len(lines) != 1 || !strings.Contains(lines[0], "msg=upstream") {
		t.Fatalf("20 failures in one second logged %d lines, want 1 upstream line: %.300q", len(lines), lines)
	}
	clock.Add(int64(time.Second))
	get(t, f.proxy.URL+path, nil)
	lines := out.Lines()
	if len(lines) != 2 || !strings.Contains(lines[1], "suppressed=19") {
		t.Fatalf("a failure a second later: %d lines, want 2, the second with suppressed=19: %.300q", len(lines), lines)
	}
	for _, l := range lines {
		if len(l) > 1<<10 {
			t.Errorf("a line of %d bytes for a path of %d; want at most 1 KiB: %.200q…", len(l), len(path), l)
		}
	}
}

// TestDeferFailuresLogOnceASecond: while Redis is down, every request a
// defer rule refuses fails to be queued; that is logged at most once a
// second, not once a request.
func TestDeferFailuresLogOnceASecond(t *testing.T) {
	srv := redistest.StartServer(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	var out redistest.SyncBuffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	var clock atomic.Int64
	clock.Store(time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC).UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	q, err := deferq.New(deferq.Options{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs"}})
	f := start(t, setup{specs: []rules.Spec{{Name: "jobs", Rate: "1/m", Action: "defer"}}, deferq: q, log: log, now: now})
	post := func() int {
		t.Helper()
		resp, err := http.Post(f.proxy.URL+"/job", "text/plain", strings.NewReader("body"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(); code != http.StatusOK {
		t.Fatalf("first request: %d, want 200 (under the limit)", code)
	}
	srv.Stop()
	for range 10 {
		post()
	}
	if lines := out.Lines(); len(lines) != 1 || !strings.Contains(lines[0], "defer: enqueue") {
		t.Fatalf("10 requests failing to be deferred in one second logged %d lines, want 1: %.400q", len(lines), lines)
	}
	clock.Add(int64(time.Second))
	post()
	if lines := out.Lines(); len(lines) != 2 || !strings.Contains(lines[1], "suppressed=9") {
		t.Fatalf("one more a second later: %d lines, want 2, the second with suppressed=9: %.400q", len(lines), lines)
	}
}

// TestCutAnswersLogOnceASecond: an answer the upstream cuts short is
// logged (ReverseProxy's error log) at most once a second, with how many
// went unlogged, on every engine: each wrote a warning, so a failing
// upstream wrote one line per request, and so could a client (its body
// stalled while the upstream streamed it back: the answer is cut off).
func TestCutAnswersLogOnceASecond(t *testing.T) {
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			brw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nthe first 25 bytes of 100")
			brw.Flush()
		}))
		t.Cleanup(up.Close)
		var out redistest.SyncBuffer
		var clock atomic.Int64
		clock.Store(time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC).UnixNano())
		s := startOn(t, ec, up.URL, engineOpts{proxy: proxy.Options{
			Logger: slog.New(slog.NewTextHandler(&out, nil)),
			Now:    func() time.Time { return time.Unix(0, clock.Load()) },
		}})
		cut := func() {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), safety)
			defer cancel()
			req := request(t, s, "POST", "/download", "payload") // a body: ReverseProxy's path
			// The client sees it cut too: no answer (its head and first
			// bytes go out in one write), or a body that ends early.
			if resp, err := s.client.Do(req.WithContext(ctx)); err == nil {
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err == nil {
					t.Fatalf("cut answer read whole: %d %q", resp.StatusCode, b)
				}
			}
			eventually(t, "the proxy's handler returns", func() bool { return s.active.Load() == 0 })
		}
		logtest.OncePerSecond(t, "cut answers", "read error during body copy", 5, out.Lines, cut, func() { clock.Add(int64(time.Second)) })
	})
}
