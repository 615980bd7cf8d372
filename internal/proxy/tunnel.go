package proxy

import (
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// tunnel is the upstream's side of an upgraded connection (a WebSocket)
// as ReverseProxy relays it: the client's bytes are written to it, the
// upstream's read from it, so it sees the traffic both ways. Once none
// has passed for idle it is closed, and ReverseProxy, its copy ended,
// closes the client's side too: an idle tunnel would otherwise hold its
// client connection, and its max_connections slot, for ever.
type tunnel struct {
	rwc   io.ReadWriteCloser
	idle  time.Duration
	start time.Time
	last  atomic.Int64 // the last bytes either way, as time since start

	mu     sync.Mutex
	timer  *time.Timer
	closed bool
}

// newTunnel returns rwc closed after idle without traffic.
func newTunnel(rwc io.ReadWriteCloser, idle time.Duration) *tunnel {
	t := &tunnel{rwc: rwc, idle: idle, start: time.Now()}
	t.mu.Lock()
	t.timer = time.AfterFunc(idle, t.check)
	t.mu.Unlock()
	return t
}

// check closes t if it has been idle for t.idle, else looks again when
// it would have been.
func (t *tunnel) check() {
	quiet := time.Since(t.start) - time.Duration(t.last.Load())
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	if quiet < t.idle {
		t.timer.Reset(t.idle - quiet)
		return
	}
	t.closed = true
	t.rwc.Close()
}

func (t *tunnel) Read(p []byte) (int, error) {
	n, err := t.rwc.Read(p)
	if n > 0 {
		t.last.Store(int64(time.Since(t.start)))
	}
	return n, err
}

func (t *tunnel) Write(p []byte) (int, error) {
	n, err := t.rwc.Write(p)
	if n > 0 {
		t.last.Store(int64(time.Since(t.start)))
	}
	return n, err
}

func (t *tunnel) Close() error {
	t.mu.Lock()
	t.closed = true
	t.timer.Stop()
	t.mu.Unlock()
	return t.rwc.Close()
}

// boundTunnel has the tunnel of resp, an answer 101 Switching Protocols,
// closed once idle (Options.TunnelIdleTimeout).
func (p *Proxy) boundTunnel(resp *http.Response) {
	if rwc, ok := resp.Body.(io.ReadWriteCloser); ok {
		resp.Body = newTunnel(rwc, p.tunnelIdle)
	}
}
