package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestLogsUnderAttack runs `sluice serve` as a process (log_level info,
// its standard error captured: slog's lines and anything else, gRPC's
// own logger included) and floods every listener with what clients
// control: newlines, ANSI escapes and huge values in keys, paths,
// methods, bodies and descriptors; bad requests of every kind; clients
// that hang up mid-answer; an upstream that fails; garbage on the gRPC
// port. The log must stay one line per record, every client value
// quoted (no raw control byte, no line a client can split or colour),
// every line bounded, and the number of lines bounded by the seconds the
// flood lasted, not by the requests in it.
func TestLogsUnderAttack(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/broken"):
			// Hang up without answering: the proxy's upstream failure.
			if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
				c.Close()
			}
		case strings.HasPrefix(r.URL.Path, "/stream"):
			// A long answer, written while the client is there.
			w.Header().Set("Content-Type", "application/octet-stream")
			chunk := bytes.Repeat([]byte("x"), 32<<10)
			for range 256 {
				if _, err := w.Write(chunk); err != nil {
					return
				}
				http.NewResponseController(w).Flush()
			}
		default:
			io.WriteString(w, "ok")
		}
	}))
	t.Cleanup(up.Close)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rl.yaml"), []byte("domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1}\n    shadow_mode: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(`listen: 127.0.0.1:0
log_level: info
proxy: {listen: 127.0.0.1:0, upstream: %s}
grpc: {listen: 127.0.0.1:0, config: [rl.yaml]}
rules:
  - name: watch
    key: [query:u]
    rate: 1/h
    action: shadow
  - name: login
    match: {methods: [POST], path: /login}
    key: [header:X-Api-Key]
    rate: 1/h
`, up.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startLogProc(t, path)
	startLines := p.lines()

	hostile := "a\nb\r\x1b[31mred\x1b[0m\x00\u2028" + strings.Repeat("é", 3000)
	esc := url.QueryEscape(hostile)
	hc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	send := func(method, u string, body string, header ...string) {
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequest(method, u, rd)
		if err != nil {
			t.Errorf("%.300v", err)
			return
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := hc.Do(req)
		if err != nil {
			return // the daemon may refuse what is sent: the log is what is checked
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	attacks := []func(i int){
		func(i int) { // the decision API: bodies, rules and keys with control bytes, huge
			send(http.MethodPost, p.api+"/v1/check", `{"rule":"`+strings.ReplaceAll(url.PathEscape(hostile), "%", "\\u00")+`","key":"k"}`)
			send(http.MethodPost, p.api+"/v1/check", "{\"rule\":\"watch\",\"key\":\"\x1b[31m"+hostile+"\",\"cost\":1e999}")
			send(http.MethodPost, p.api+"/v1/report", "not json \x1b[2J\n"+hostile)
			send(http.MethodGet, p.api+"/v1/deferred/"+esc, "")
			send(http.MethodPost, p.api+"/json", `{"domain":"`+esc+`","descriptors":[]}`)
		},
		func(i int) { // the proxy: a shadow rule keyed on a hostile query value (short: kept whole in the key; long: hashed), a hostile path
			v := esc
			if i%2 == 0 {
				v = url.QueryEscape(hostile[:14])
			}
			send(http.MethodGet, fmt.Sprintf("%s/x%%0A%%1B[31m%s?u=%s%d", p.proxy, url.PathEscape(hostile[:60]), v, i), "")
		},
		func(i int) { // the proxy: an upstream that fails, with a hostile path and method
			send("M"+strings.Repeat("E", 4000), p.proxy+"/broken/%0A%1B[2J"+esc+"?u=x", "")
		},
		func(i int) { // the proxy: a client that hangs up mid-answer
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.proxy+"/stream?u=s", nil)
			if resp, err := hc.Do(req); err == nil {
				resp.Body.Read(make([]byte, 1024))
				cancel()
				resp.Body.Close()
			}
			cancel()
		},
		func(i int) { // forward auth: a gateway not trusted, no method said, a huge one asked with
			send("F"+strings.Repeat("A", 60000), p.api+"/v1/forward-auth", "", "X-Forwarded-For", "203.0.113.9", "X-Forwarded-Uri", "/login")
			send(http.MethodGet, p.api+"/v1/forward-auth", "", "X-Forwarded-Uri", "/a", "X-Original-URI", "/b%0A"+esc)
			// Control bytes in header values, which Go's client will not send.
			if c, err := net.Dial("tcp", strings.TrimPrefix(p.api, "http://")); err == nil {
				io.WriteString(c, "GET /v1/forward-auth HTTP/1.1\r\nHost: x\r\nX-Forwarded-Uri: /login\x1b[31m"+hostile[:40]+"\r\n"+
					"X-Original-URI: /b\x1b[2J\r\nX-Forwarded-Method: P\x1bOST\r\nConnection: close\r\n\r\n")
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				io.Copy(io.Discard, c)
				c.Close()
			}
		},
		func(i int) { // gRPC: garbage, an HTTP/1 request, a bad preface, then a bad request
			if c, err := net.Dial("tcp", p.grpc); err == nil {
				io.WriteString(c, []string{"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x12\x04\x00\x00\x00\x00\x00" + hostile, "\x1b[31m" + hostile}[i%3])
				c.SetReadDeadline(time.Now().Add(2 * time.Second))
				io.Copy(io.Discard, c)
				c.Close()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			p.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: ""})
			p.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: nil})
		},
	}
	// First the shadow rule alone, so that its one line a second quotes
	// a hostile key.
	for i := range 3 {
		attacks[1](i)
	}
	const rounds = 300
	start := time.Now()
	var wg sync.WaitGroup
	next := make(chan int)
	for range 4 {
		wg.Go(func() {
			for i := range next {
				attacks[i%len(attacks)](i / len(attacks))
			}
		})
	}
	for i := range rounds * len(attacks) {
		next <- i
	}
	close(next)
	wg.Wait()
	elapsed := time.Since(start)
	p.stop(t)

	logs := p.logs.String()
	lines := strings.Split(strings.TrimSuffix(logs, "\n"), "\n")
	for i, line := range lines {
		if !strings.HasPrefix(line, "time=") && !strings.HasPrefix(line, "sluice: ") { // a record, or the command's own word
			t.Errorf("log line %d is no log record of the daemon's (a record split, or another logger): %.200q", i, line)
		}
		if len(line) > maxLogLine {
			t.Errorf("log line %d is %d bytes, over %d: %.200q…", i, len(line), maxLogLine, line)
		}
		if j := strings.IndexFunc(line, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\u2028' }); j >= 0 {
			t.Errorf("log line %d holds the raw control character %q (at %d): %.200q", i, line[j], j, line)
		}
	}
	// What the flood may add: at most one line a second for each kind of
	// event it causes (each throttle), plus the warnings said once per
	// gateway, plus the shutdown's.
	const throttles, perGateway, shutdown = 8, 2, 4
	budget := throttles*(int(elapsed/time.Second)+2) + perGateway + shutdown
	if n := len(lines) - startLines; n > budget {
		t.Errorf("%d requests in %v wrote %d log lines; want at most %d (a line a second per kind, not a line per request)", rounds*len(attacks), elapsed.Round(time.Millisecond), n, budget)
		counts := map[string]int{}
		for _, l := range lines[startLines:] {
			if m := reMsg.FindStringSubmatch(l); m != nil {
				counts[m[1]]++
			} else {
				counts[l[:min(len(l), 80)]]++
			}
		}
		for msg, n := range counts {
			t.Logf("  %5d × %s", n, msg)
		}
	}
	// A line that stands for others says how many it left out, so the
	// log still tells the flood's size: the bad gRPC requests' lines,
	// each with those suppressed since the last, account for all of them
	// but those after the last line.
	badSent := 3 * rounds // attacks[5]: two bad requests each; attacks[0]: one (POST /json without descriptors)
	told, said := 0, 0
	for _, l := range lines {
		if !strings.Contains(l, `msg="bad rate limit request"`) && !strings.Contains(l, `msg="shadow rule would deny"`) && !strings.Contains(l, "msg=upstream") {
			continue
		}
		m := reSuppressed.FindStringSubmatch(l)
		if m == nil {
			t.Errorf("a line that stands for a second of such events says nothing of those left out (no suppressed=N): %.200q", l)
			continue
		}
		if strings.Contains(l, `msg="bad rate limit request"`) {
			n, _ := strconv.Atoi(m[1])
			told += 1 + n
			said++
		}
	}
	if told > badSent || told <= said {
		t.Errorf("the bad gRPC requests' %d lines account for %d requests; want more than the lines, at most the %d sent", said, told, badSent)
	}
}

var reSuppressed = regexp.MustCompile(` suppressed=(\d+)`)

// maxLogLine bounds a log line: a record quotes a client's values cut to
// a few hundred bytes.
const maxLogLine = 4096

var reMsg = regexp.MustCompile(`msg=("(?:[^"\\]|\\.)*"|\S+)`)

// logProc is `sluice serve` as a process (its standard error captured),
// with a client of its rate limit service.
type logProc struct {
	*sluiceProc
	rls rlsv3.RateLimitServiceClient
}

var (
	reProxy = regexp.MustCompile(`proxy on (http://\S+)`)
	reGRPC  = regexp.MustCompile(`\(gRPC\) on (\S+)`)
)

func startLogProc(t *testing.T, path string) *logProc {
	t.Helper()
	p := &logProc{sluiceProc: startSluiceProcAll(t, path)}
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	p.rls = rlsv3.NewRateLimitServiceClient(conn)
	return p
}

// lines returns the number of lines logged so far.
func (p *logProc) lines() int { return strings.Count(p.logs.String(), "\n") }

// stop ends the process with SIGTERM and checks it exits 0.
func (p *logProc) stop(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second): // a hang guard
		t.Fatal("sluice serve: no exit within 30s of SIGTERM")
	}
	if p.err != nil {
		t.Errorf("sluice serve: exit %v after SIGTERM, want 0", p.err)
	}
}
