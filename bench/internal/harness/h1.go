package harness

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// ErrFraming is an answer that cannot be delimited: a malformed head, a
// body neither sized by Content-Length nor chunked, or one over maxBody.
var ErrFraming = errors.New("answer with a malformed head, without Content-Length or chunked body, or over 64 MiB")

// maxBody bounds an answer's body: a load generator reads small answers,
// and a bogus length must not make it allocate gigabytes.
const maxBody = 64 << 20

// answer is one HTTP/1.1 answer found at the start of a buffer.
type answer struct {
	n      int // its length in the buffer, head and body; 0: the buffer does not hold all of it yet
	status int
	body   []byte // with Content-Length: aliases the buffer; chunked: the chunks' data, if asked for
	closed bool   // Connection: close
}

// parseAnswer reads the first answer in b, the bytes a connection has
// received so far: it returns n == 0 and no error while they are only
// the start of one. It is the one parser of both load clients (Conn and
// Paced's event loop), and it never reads past a line's end, so a prefix
// of an answer is never an error. dechunk, if not nil, receives the data
// of a chunked body (for Conn; Paced reads no bodies).
func parseAnswer(b []byte, dechunk *[]byte) (answer, error) {
	var a answer
	line, at := nextLine(b, 0)
	if line == nil {
		return a, nil
	}
	// "HTTP/1.1 200 OK\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return a, fmt.Errorf("%w: %q", ErrFraming, line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return a, fmt.Errorf("%w: %q", ErrFraming, line)
	}
	length, chunked := -1, false
	for {
		line, at = nextLine(b, at)
		if line == nil {
			return answer{}, nil
		}
		if len(bytes.TrimRight(line, "\r\n")) == 0 { // end of the head
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return answer{}, fmt.Errorf("%w: %q", ErrFraming, line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("content-length")):
			if length, err = strconv.Atoi(string(value)); err != nil || length < 0 || length > maxBody {
				return answer{}, fmt.Errorf("%w: %q", ErrFraming, line)
			}
		case bytes.EqualFold(name, []byte("transfer-encoding")):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("connection")):
			a.closed = bytes.EqualFold(value, []byte("close"))
		}
	}
	a.status = status
	switch {
	case chunked:
		end, err := chunks(b, at, dechunk)
		if end == 0 || err != nil {
			return answer{}, err
		}
		a.n = end
		if dechunk != nil {
			a.body = *dechunk
		}
	case length < 0 && (status == 204 || status == 304 || status/100 == 1):
		a.n = at
	case length < 0:
		return answer{}, ErrFraming
	case len(b)-at < length:
		return answer{}, nil
	default:
		a.n, a.body = at+length, b[at:at+length]
	}
	return a, nil
}

// nextLine is the line of b starting at at, with its "\n", and where the
// next one starts; nil if b holds no whole line there.
func nextLine(b []byte, at int) ([]byte, int) {
	i := bytes.IndexByte(b[at:], '\n')
	if i < 0 {
		return nil, at
	}
	return b[at : at+i+1], at + i + 1
}

// chunks reads a chunked body starting at at (and its trailers): where it
// ends, or 0 if b does not hold all of it yet; its data is appended to
// *dst if dst is not nil.
func chunks(b []byte, at int, dst *[]byte) (int, error) {
	if dst != nil {
		*dst = (*dst)[:0]
	}
	total := 0
	for {
		line, next := nextLine(b, at)
		if line == nil {
			return 0, nil
		}
		size, _, _ := bytes.Cut(bytes.TrimSpace(line), []byte(";"))
		n, err := strconv.ParseInt(string(size), 16, 32)
		if err != nil || n < 0 || total+int(n) > maxBody {
			return 0, fmt.Errorf("%w: chunk size %q", ErrFraming, line)
		}
		at = next
		if n == 0 {
			for { // trailers, up to the empty line
				line, at = nextLine(b, at)
				if line == nil {
					return 0, nil
				}
				if len(bytes.TrimRight(line, "\r\n")) == 0 {
					return at, nil
				}
			}
		}
		if len(b)-at < int(n)+2 { // the chunk and its CRLF
			return 0, nil
		}
		if !bytes.Equal(b[at+int(n):at+int(n)+2], []byte("\r\n")) {
			return 0, fmt.Errorf("%w: chunk not ended by CRLF", ErrFraming)
		}
		if dst != nil {
			*dst = append(*dst, b[at:at+int(n)]...)
		}
		total += int(n)
		at += int(n) + 2
	}
}

// Conn is a blocking HTTP/1.1 client for closed-loop load: one
// keep-alive connection, one request in flight, no allocation per request
// once warm. It writes a complete request given as bytes and reads the
// answer's status and body, no more: net/http's client costs about as
// much CPU per request as a daemon's whole decision, and a generator
// shares the machine's cores with the servers it measures.
type Conn struct {
	c       net.Conn
	timeout time.Duration
	buf     []byte // received bytes: buf[:n]
	n       int
	dropped int    // the last answer's length, dropped from buf at the next read
	body    []byte // a chunked answer's data
	closed  bool   // the server said Connection: close
}

// NewConn wraps an open connection; each Do must finish within timeout
// (no limit if zero).
func NewConn(c net.Conn, timeout time.Duration) *Conn {
	return &Conn{c: c, timeout: timeout, buf: make([]byte, 4096)}
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
	a, err := c.read()
	return a.status, a.body, err
}

// drop removes the last answer from buf; what follows it stays.
func (c *Conn) drop() {
	if c.dropped > 0 {
		c.n = copy(c.buf, c.buf[c.dropped:c.n])
		c.dropped = 0
	}
}

// read reads until buf holds a whole answer, and drops it from buf (its
// body stays readable until the next read).
func (c *Conn) read() (answer, error) {
	c.drop()
	for {
		a, err := parseAnswer(c.buf[:c.n], &c.body)
		if err != nil {
			return a, err
		}
		if a.n > 0 {
			c.closed = a.closed
			c.dropped = a.n
			return a, nil
		}
		if c.n == len(c.buf) {
			if len(c.buf) >= maxBody+64<<10 {
				return answer{}, ErrFraming
			}
			c.buf = append(c.buf, make([]byte, len(c.buf))...)
		}
		m, err := c.c.Read(c.buf[c.n:])
		c.n += m
		if err == io.EOF && m > 0 {
			err = nil
		}
		if err != nil {
			return answer{}, err
		}
	}
}

// GetRequest is a GET of path from host, keep-alive, as wrk sends it.
func GetRequest(host, path string) []byte {
	return []byte("GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n")
}
