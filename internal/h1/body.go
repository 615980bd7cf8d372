package h1

import (
	"io"
	"net/http"
	"sync/atomic"
)

// readBody is the body of a POST the front serves (Server.MaxBody): its
// bytes came whole with the head and stay in the connection's read
// buffer until the handler returns. Read after Close (or after the
// handler returned) fails, as net/http's body does.
type readBody struct {
	b      []byte
	closed atomic.Bool
}

func (b *readBody) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, http.ErrBodyReadAfterClose
	}
	if len(b.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, b.b)
	b.b = b.b[n:]
	if len(b.b) == 0 {
		return n, io.EOF
	}
	return n, nil
}

func (b *readBody) Close() error {
	b.closed.Store(true)
	return nil
}

// InMemory reports that the body is read already: nothing waits on the
// client to read it (listener.BodyTimeout skips it).
func (b *readBody) InMemory() bool { return true }
