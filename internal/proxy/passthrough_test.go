package proxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/rules"
)

func TestForwardingHeaders(t *testing.T) {
	spec := []rules.Spec{{Name: "per-ip", Rate: "2/m"}}
	t.Run("untrusted peer: a spoofed X-Forwarded-For changes nothing", func(t *testing.T) {
		f := start(t, setup{specs: spec})
		for i, want := range []int{200, 200, 429} {
			// A new spoofed address each time: still one client.
			resp, _ := get(t, f.proxy.URL+"/p", map[string]string{"X-Forwarded-For": fmt.Sprintf("10.0.0.%d", i), "Forwarded": "for=10.9.9.9"})
			if resp.StatusCode != want {
				t.Errorf("request %d with a spoofed X-Forwarded-For: %d, want %d", i, resp.StatusCode, want)
			}
		}
		f.up.mu.Lock()
		defer f.up.mu.Unlock()
		if got := f.up.last.Header.Values("X-Forwarded-For"); len(got) != 1 || got[0] != "127.0.0.1" {
			t.Errorf("upstream X-Forwarded-For = %q, want [127.0.0.1]", got)
		}
		checkForwarded(t, f.up.last.Header, "http", strings.TrimPrefix(f.proxy.URL, "http://")) // Sluice's own, not the client's for=10.9.9.9
		u, _ := url.Parse(f.up.srv.URL)
		if f.up.last.Host != u.Host || f.up.last.Header.Get("X-Forwarded-Host") != strings.TrimPrefix(f.proxy.URL, "http://") {
			t.Errorf("upstream Host %q X-Forwarded-Host %q, want the upstream's host and the original", f.up.last.Host, f.up.last.Header.Get("X-Forwarded-Host"))
		}
		if f.up.last.Header.Get("X-Forwarded-Proto") != "http" {
			t.Errorf("upstream X-Forwarded-Proto = %q, want http", f.up.last.Header.Get("X-Forwarded-Proto"))
		}
	})
	t.Run("trusted peer: the client from X-Forwarded-For", func(t *testing.T) {
		f := start(t, setup{specs: spec, trusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, preserve: true})
		for i, c := range []string{"203.0.113.1", "203.0.113.2", "203.0.113.1"} {
			resp, _ := get(t, f.proxy.URL+"/p", map[string]string{"X-Forwarded-For": c, "Host": "app.example"})
			if resp.StatusCode != 200 {
				t.Errorf("request %d from %s: %d, want 200 (2 per client)", i, c, resp.StatusCode)
			}
		}
		f.up.mu.Lock()
		defer f.up.mu.Unlock()
		if got := f.up.last.Header.Get("X-Forwarded-For"); got != "203.0.113.1" {
			t.Errorf("upstream X-Forwarded-For = %q, want 203.0.113.1", got)
		}
		if f.up.last.Host != "app.example" || f.up.last.Header.Get("X-Forwarded-Host") != "app.example" {
			t.Errorf("PreserveHost: upstream Host %q X-Forwarded-Host %q, want app.example for both", f.up.last.Host, f.up.last.Header.Get("X-Forwarded-Host"))
		}
	})
}

// The response streams: the client reads the first chunk while the
// upstream is still writing.
func TestStreaming(t *testing.T) {
	release := make(chan struct{})
	up := &upstream{}
	up.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, "second\n")
	}))
	t.Cleanup(up.srv.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	f := start(t, setup{specs: []rules.Spec{{Name: "r", Rate: "10/s"}}, up: up})
	resp, err := http.Get(f.proxy.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "first\n" {
		t.Fatalf("first chunk: %q %v, want it before the upstream finishes", line, err)
	}
	close(release)
	if rest, _ := io.ReadAll(br); string(rest) != "second\n" {
		t.Errorf("rest of the stream: %q", rest)
	}
	if resp.Header.Get("X-RateLimit-Limit") != "10" {
		t.Errorf("streamed response X-RateLimit-Limit %q, want 10", resp.Header.Get("X-RateLimit-Limit"))
	}
}

// An Upgrade request (as WebSocket uses) passes through both ways, also
// when h2c is named beside it (dropped: h2c_test.go).
func TestUpgrade(t *testing.T) {
	for _, upgrade := range []string{"echo", "echo, h2c"} {
		t.Run(upgrade, func(t *testing.T) { testUpgrade(t, upgrade) })
	}
}

func testUpgrade(t *testing.T, upgrade string) {
	up := &upstream{}
	up.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			http.Error(w, "want Upgrade: echo", 400)
			return
		}
		conn, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		brw.Flush()
		for {
			line, err := brw.ReadString('\n')
			if err != nil {
				return
			}
			brw.WriteString("echo: " + line)
			brw.Flush()
		}
	}))
	t.Cleanup(up.srv.Close)
	f := start(t, setup{specs: []rules.Spec{{Name: "r", Rate: "10/s"}}, up: up})
	conn, err := net.Dial("tcp", strings.TrimPrefix(f.proxy.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: app.example\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", upgrade)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade response: %v %v, want 101", resp, err)
	}
	if resp.Header.Get("X-RateLimit-Limit") != "10" {
		t.Errorf("101 X-RateLimit-Limit %q, want 10", resp.Header.Get("X-RateLimit-Limit"))
	}
	for _, msg := range []string{"ping\n", "pong\n"} {
		io.WriteString(conn, msg)
		got, err := br.ReadString('\n')
		if err != nil || got != "echo: "+msg {
			t.Errorf("over the upgraded connection: sent %q, got %q %v", msg, got, err)
		}
	}
}
