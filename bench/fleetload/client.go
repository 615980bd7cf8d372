package main

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/sluicehq/sluice/bench/internal/harness"
)

// conn is the load generator's client: harness.Conn (one keep-alive
// connection, one request in flight, no allocation per request) sending
// POST /v1/check from a reused buffer. net/http's client costs about as
// much CPU per request as the daemon's whole decision, and the generator
// shares the machine's cores with the daemons it measures. The same
// client serves every mode, so the comparison stays fair.
type conn struct {
	*harness.Conn
	host string
	req  []byte // the request being built: head, then body
}

func dial(addr string) (*conn, error) {
	c, err := harness.Dial(addr)
	if err != nil {
		return nil, err
	}
	return &conn{Conn: c, host: addr, req: make([]byte, 0, 256)}, nil
}

// check sends body to /v1/check and reports whether the answer says
// allowed. An answer other than 200 is an error quoting it.
func (c *conn) check(body []byte) (bool, error) {
	c.req = append(c.req[:0], "POST /v1/check HTTP/1.1\r\nHost: "...)
	c.req = append(c.req, c.host...)
	c.req = append(c.req, "\r\nContent-Type: application/json\r\nContent-Length: "...)
	c.req = strconv.AppendInt(c.req, int64(len(body)), 10)
	c.req = append(c.req, "\r\n\r\n"...)
	c.req = append(c.req, body...)
	status, answer, err := c.Do(c.req)
	if err != nil {
		return false, err
	}
	if status != 200 {
		return false, fmt.Errorf("%s: %d %s", c.host, status, answer)
	}
	return bytes.Contains(answer, []byte(`"allowed":true`)), nil
}
