package harness

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
)

// Conn reads each framing a server may answer with: Content-Length
// (within and beyond its buffer), chunked with trailers, a 204 without
// a body; it refuses an answer it cannot delimit, and reports a
// Connection: close.
func TestConnFraming(t *testing.T) {
	big := strings.Repeat("x", 10000)
	for _, c := range []struct {
		name, answer string
		status       int
		body         string
		reusable     bool
		err          error
	}{
		{"content-length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", 200, "hello", true, nil},
		{"beyond the buffer", "HTTP/1.1 200 OK\r\ncontent-length: 10000\r\n\r\n" + big, 200, big, true, nil},
		{"chunked", "HTTP/1.1 429 Too Many Requests\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\nTrailer: 1\r\n\r\n", 429, "abcde", true, nil},
		{"no content", "HTTP/1.1 204 No Content\r\n\r\n", 204, "", true, nil},
		{"close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", 200, "ok", false, nil},
		{"no length", "HTTP/1.1 200 OK\r\n\r\nuntil close", 0, "", true, ErrFraming},
		{"bad status line", "HTTP/2 200\r\n\r\n", 0, "", true, ErrFraming},
		{"huge length", "HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n", 0, "", true, ErrFraming},
		{"huge chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n7fffffff\r\n", 0, "", true, ErrFraming},
		{"bad chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 0, "", true, ErrFraming},
	} {
		t.Run(c.name, func(t *testing.T) {
			client, server := net.Pipe()
			defer client.Close()
			got := make(chan string, 1)
			go func() {
				defer server.Close()
				req, err := http.ReadRequest(bufio.NewReader(server))
				if err != nil {
					got <- err.Error()
					return
				}
				got <- req.Method + " " + req.URL.Path + " " + req.Host
				server.Write([]byte(c.answer))
			}()
			conn := NewConn(client, 0)
			status, body, err := conn.Do(GetRequest("example.test", "/x"))
			if r := <-got; r != "GET /x example.test" {
				t.Fatalf("the server read %q", r)
			}
			if !errors.Is(err, c.err) || (c.err == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, c.err)
			}
			if c.err != nil {
				return
			}
			if status != c.status || string(body) != c.body || conn.Reusable() != c.reusable {
				t.Fatalf("got %d %q reusable %v, want %d %q %v", status, body, conn.Reusable(), c.status, c.body, c.reusable)
			}
		})
	}
}

// Whatever a server answers, parseAnswer returns an answer, an error or
// "not all of it yet", never panics, never returns a body longer than
// its input; and on every prefix of an answer it parses, it says "not
// all of it yet" (a slow server's answer is not an error).
func FuzzParseAnswer(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"))
	f.Add([]byte("HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 99999\r\n\r\nshort"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n7fffffff\r\nabc"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var body []byte
		a, err := parseAnswer(b, &body)
		if err != nil || a.n == 0 {
			return
		}
		if a.n > len(b) || len(a.body) > a.n {
			t.Fatalf("answer of %d bytes, body of %d, from %d", a.n, len(a.body), len(b))
		}
		for k := range a.n {
			if p, err := parseAnswer(b[:k], nil); err != nil || p.n != 0 {
				t.Fatalf("prefix of %d of %d bytes: n %d, err %v; want not all of it yet", k, a.n, p.n, err)
			}
		}
	})
}
