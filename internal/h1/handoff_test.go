package h1_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// Pipelined requests are answered in order, the simple ones on the front,
// and the first other one (and all after it) by net/http with the bytes
// already read: answers identical to net/http's alone.
func TestPipelineAndHandOff(t *testing.T) {
	plain, front := serveBoth(t, echo)
	for _, tc := range []struct {
		raw     string
		methods []string
	}{
		{"GET /1 HTTP/1.1\r\nHost: x\r\n\r\nHEAD /2 HTTP/1.1\r\nHost: x\r\n\r\nGET /3 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", []string{"GET", "HEAD", "GET"}},
		{"GET /1 HTTP/1.1\r\nHost: x\r\n\r\nPOST /2 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabcGET /3 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", []string{"GET", "POST", "GET"}},
		{"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", []string{"POST", "GET"}},
		// Smuggling defence: net/http refuses both framings at once.
		{"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", []string{"GET"}},
		{"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", []string{"GET"}},
		{"GET / HTTP/1.1\r\n\r\n", []string{"GET"}},                       // no Host: 400
		{"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", []string{"GET"}}, // 400
		{"GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n", []string{"GET"}},
		{"GET / HTTP/1.1\nHost: x\nConnection: close\n\n", []string{"GET"}},
		{"GET / HTTP/3.0\r\nHost: x\r\n\r\n", []string{"GET"}},
		{"GET / HTTP/1.1\r\nHost: x\r\nX: " + strings.Repeat("a", 1<<21) + "\r\n\r\n", []string{"GET"}}, // 431
		{"GET / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n", []string{"GET"}},
		{"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /2 HTTP/1.0\r\n\r\n", []string{"GET", "GET"}},
		{"GET /%zz HTTP/1.1\r\nHost: x\r\n\r\n", []string{"GET"}},
	} {
		a, b := exchange(t, plain, tc.raw, tc.methods...), exchange(t, front, tc.raw, tc.methods...)
		if len(a) != len(b) {
			t.Errorf("%q: %d answers from net/http, %d from the front", tc.raw, len(a), len(b))
			continue
		}
		for i := range a {
			same(t, short(tc.raw), a[i], b[i])
		}
	}
}

// Upgrades are net/http's: the handler can hijack the handed-off
// connection.
func TestUpgradeHandedOff(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		line, _ := brw.ReadString('\n')
		brw.WriteString("echo: " + line)
		brw.Flush()
	})
	front := serveWith(t, &http.Server{Handler: h}, true)
	c, err := net.Dial("tcp", front)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	io.WriteString(c, "hello\n")
	if got, _ := br.ReadString('\n'); got != "echo: hello\n" {
		t.Errorf("after the upgrade: %q", got)
	}
}
