package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"
)

// conn is the load generator's HTTP/1.1 client: one keep-alive connection,
// one request in flight, no allocation per request. It writes a complete
// POST /v1/check from a reused buffer and reads the answer's status line,
// Content-Length and body, no more: net/http's client costs about as much
// CPU per request as the daemon's whole decision, and the generator shares
// the machine's cores with the daemons it measures. The same client serves
// every mode, so the comparison stays fair.
type conn struct {
	c    net.Conn
	r    *bufio.Reader
	req  []byte // the request being built: head, then body
	host string
	body []byte // the last answer's body (aliases r's buffer until the next read)
}

func dial(addr string) (*conn, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	return &conn{c: c, r: bufio.NewReaderSize(c, 4096), req: make([]byte, 0, 256), host: addr}, nil
}

func (c *conn) Close() error { return c.c.Close() }

// check sends body to /v1/check and reports whether the answer says
// allowed. An answer other than 200 is an error quoting it.
func (c *conn) check(body []byte) (bool, error) {
	c.req = append(c.req[:0], "POST /v1/check HTTP/1.1\r\nHost: "...)
	c.req = append(c.req, c.host...)
	c.req = append(c.req, "\r\nContent-Type: application/json\r\nContent-Length: "...)
	c.req = strconv.AppendInt(c.req, int64(len(body)), 10)
	c.req = append(c.req, "\r\n\r\n"...)
	c.req = append(c.req, body...)
	if err := c.c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return false, err
	}
	if _, err := c.c.Write(c.req); err != nil {
		return false, err
	}
	status, err := c.readResponse()
	if err != nil {
		return false, err
	}
	if status != 200 {
		return false, fmt.Errorf("%s: %d %s", c.host, status, c.body)
	}
	return bytes.Contains(c.body, []byte(`"allowed":true`)), nil
}

var errFraming = errors.New("fleetload: answer without Content-Length or with a malformed head")

// readResponse reads one answer: its status, and its body into c.body.
func (c *conn) readResponse() (int, error) {
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	// "HTTP/1.1 200 OK\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, fmt.Errorf("%w: %q", errFraming, line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, fmt.Errorf("%w: %q", errFraming, line)
	}
	n := -1
	for {
		line, err := c.r.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		if len(line) <= 2 { // "\r\n": end of the head
			break
		}
		const cl = "content-length:"
		if len(line) > len(cl) && bytes.EqualFold(line[:len(cl)], []byte(cl)) {
			n, err = strconv.Atoi(string(bytes.TrimSpace(line[len(cl):])))
			if err != nil {
				return 0, fmt.Errorf("%w: %q", errFraming, line)
			}
		}
	}
	if n < 0 || n > c.r.Size() {
		return 0, errFraming
	}
	c.body, err = c.r.Peek(n)
	if err != nil {
		return 0, err
	}
	_, err = c.r.Discard(n)
	return status, err
}
