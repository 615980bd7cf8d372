package harness

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"
)

// Conn is the load generators' HTTP/1.1 client: one keep-alive connection,
// one request in flight, no allocation per request once warm. It writes a
// complete request given as bytes and reads the answer's status line, its
// Content-Length or chunked body, no more: net/http's client costs about
// as much CPU per request as a daemon's whole decision, and a generator
// shares the machine's cores with the servers it measures.
type Conn struct {
	c       net.Conn
	r       *bufio.Reader
	timeout time.Duration
	body    []byte // the last answer's body when it did not fit in r's buffer
	closed  bool   // the server said Connection: close
}

// NewConn wraps an open connection; each Do must finish within timeout
// (no limit if zero).
func NewConn(c net.Conn, timeout time.Duration) *Conn {
	return &Conn{c: c, r: bufio.NewReaderSize(c, 4096), timeout: timeout}
}

// Dial opens a connection to addr (within 5s), each Do bounded by 5s.
func Dial(addr string) (*Conn, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	return NewConn(c, 5*time.Second), nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// Reusable reports whether another request may follow on c: false once
// the server answered with Connection: close.
func (c *Conn) Reusable() bool { return !c.closed }

// Do writes req, one complete HTTP/1.1 request, and reads the answer. The
// body aliases c's buffers: it is valid until the next Do.
func (c *Conn) Do(req []byte) (status int, body []byte, err error) {
	if c.timeout > 0 {
		if err := c.c.SetDeadline(time.Now().Add(c.timeout)); err != nil {
			return 0, nil, err
		}
	}
	if _, err := c.c.Write(req); err != nil {
		return 0, nil, err
	}
	return c.readResponse()
}

// ErrFraming is an answer Conn cannot delimit: a malformed head, or a body
// neither sized by Content-Length nor chunked.
var ErrFraming = errors.New("answer with a malformed head or without Content-Length or chunked body")

// maxBody bounds an answer's body: a load generator reads small answers,
// and a bogus length must not make it allocate gigabytes.
const maxBody = 64 << 20

func (c *Conn) readResponse() (int, []byte, error) {
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return 0, nil, err
	}
	// "HTTP/1.1 200 OK\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, nil, fmt.Errorf("%w: %q", ErrFraming, line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %q", ErrFraming, line)
	}
	n, chunked := -1, false
	for {
		line, err := c.r.ReadSlice('\n')
		if err != nil {
			return 0, nil, err
		}
		if len(line) <= 2 { // "\r\n": end of the head
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return 0, nil, fmt.Errorf("%w: %q", ErrFraming, line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("content-length")):
			if n, err = strconv.Atoi(string(value)); err != nil || n < 0 || n > maxBody {
				return 0, nil, fmt.Errorf("%w: %q", ErrFraming, line)
			}
		case bytes.EqualFold(name, []byte("transfer-encoding")):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("connection")):
			c.closed = bytes.EqualFold(value, []byte("close"))
		}
	}
	switch {
	case chunked:
		b, err := c.readChunked()
		return status, b, err
	case n < 0 && (status == 204 || status == 304 || status/100 == 1):
		return status, nil, nil
	case n < 0:
		return 0, nil, ErrFraming
	case n <= c.r.Size():
		b, err := c.r.Peek(n)
		if err != nil {
			return 0, nil, err
		}
		_, err = c.r.Discard(n)
		return status, b, err
	default:
		c.body = growTo(c.body, n)
		_, err := ioReadFull(c.r, c.body)
		return status, c.body, err
	}
}

// readChunked reads a chunked body (and its trailers) into c.body.
func (c *Conn) readChunked() ([]byte, error) {
	c.body = c.body[:0]
	for {
		line, err := c.r.ReadSlice('\n')
		if err != nil {
			return nil, err
		}
		size, _, _ := bytes.Cut(bytes.TrimSpace(line), []byte(";"))
		n, err := strconv.ParseInt(string(size), 16, 32)
		if err != nil || n < 0 || int64(len(c.body))+n > maxBody {
			return nil, fmt.Errorf("%w: chunk size %q", ErrFraming, line)
		}
		if n == 0 {
			for { // trailers, up to the empty line
				line, err := c.r.ReadSlice('\n')
				if err != nil {
					return nil, err
				}
				if len(line) <= 2 {
					return c.body, nil
				}
			}
		}
		at := len(c.body)
		c.body = growTo(c.body, at+int(n)+2) // the chunk and its CRLF
		if _, err := ioReadFull(c.r, c.body[at:]); err != nil {
			return nil, err
		}
		if !bytes.Equal(c.body[len(c.body)-2:], []byte("\r\n")) {
			return nil, fmt.Errorf("%w: chunk not ended by CRLF", ErrFraming)
		}
		c.body = c.body[:len(c.body)-2]
	}
}

// growTo returns b resliced to n bytes, reallocated if its capacity is less.
func growTo(b []byte, n int) []byte {
	if cap(b) < n {
		nb := make([]byte, n, max(n, 2*cap(b)))
		copy(nb, b)
		return nb
	}
	return b[:n]
}

// GetRequest is a GET of path from host, keep-alive, as wrk sends it.
func GetRequest(host, path string) []byte {
	return []byte("GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n")
}
