package proxy

import (
	"errors"
	"io"
	"net/http"
	"sync/atomic"
)

// endedBody is the request body ReverseProxy's transport reads: once the
// body has ended (io.EOF, or all Content-Length bytes read), it answers
// io.EOF without asking the body under it again. It also remembers that
// a read of the client's body failed (a malformed chunked encoding, the
// client gone), so that the failure is not blamed on the upstream.
//
// Why: on HTTP/1, net/http's server reads what is left of a request body
// and closes it when the answer's head goes out (it does not let a
// handler read the body while it writes), and the transport, having sent
// a body's Content-Length bytes, reads it once more to see its end (Go
// issue 40747). When the upstream answered quickly, that read could come
// after the close and fail ("invalid Read on closed Body"); the transport
// took it for a failed request and closed the upstream connection, and
// the answer streaming through it stopped short.
type endedBody struct {
	rc    io.ReadCloser
	left  int64 // Content-Length bytes still to come; -1: unknown
	ended bool
	// failed: a read of the body returned an error other than io.EOF.
	// Set by the transport's goroutine, read by the handler's.
	failed atomic.Bool
	// in and out are the client's request's trailer and the upstream
	// request's (set by the proxy's rewrite): at the body's end the values
	// of out's fields are taken from in, which the server fills as the
	// body ends. ReverseProxy clones the trailer before the body is read,
	// so without this the upstream got each declared field empty.
	in, out http.Header
}

func newEndedBody(rc io.ReadCloser, length int64) *endedBody {
	if length < 0 {
		length = -1
	}
	return &endedBody{rc: rc, left: length}
}

func (b *endedBody) Read(p []byte) (int, error) {
	if b.ended {
		return 0, io.EOF
	}
	n, err := b.rc.Read(p)
	if b.left > 0 {
		b.left -= int64(n)
		// A body with trailers (over HTTP/2 a Content-Length may come
		// with them) is read to its end, where the trailer is filled in.
		if b.left <= 0 && len(b.out) == 0 {
			b.ended = true
		}
	}
	switch {
	case err == io.EOF:
		b.ended = true
		for k := range b.out {
			b.out[k] = b.in[k]
		}
	case err != nil:
		b.failed.Store(true)
	}
	return n, err
}

func (b *endedBody) Close() error { return b.rc.Close() }

// errClientBody marks a forwarding that failed because the client's body
// could not be read (endedBody.failed).
var errClientBody = errors.New("proxy: the client's request body could not be read")
