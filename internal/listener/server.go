package listener

import (
	"io"
	"log"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/metrics"
)

// Defaults of the client-side limits (the api: and proxy: blocks).
const (
	// DefaultBodyReadTimeout is the longest wait between two reads of a
	// request body, as nginx's client_body_timeout (60s there).
	DefaultBodyReadTimeout = 30 * time.Second
	// DefaultSendTimeout is the longest wait between two writes to a
	// client that make progress, as nginx's send_timeout (60s there too).
	DefaultSendTimeout = 60 * time.Second
	// DefaultMaxConnections caps the client connections one listener
	// holds at once.
	DefaultMaxConnections = 10_000
)

// Options are the client-side limits of one HTTP listener (the api: and
// proxy: blocks of the config).
type Options struct {
	// Name labels the listener's metrics: "api", "proxy".
	Name string
	// ReadHeaderTimeout bounds reading a request's headers; 0: none.
	ReadHeaderTimeout time.Duration
	// BodyReadTimeout is the longest wait between two reads of a request
	// body; 0: none.
	BodyReadTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long; 0: none
	// (net/http then uses ReadHeaderTimeout).
	IdleTimeout time.Duration
	// SendTimeout is the longest a write to the client may go without
	// progress (the client reads nothing): the connection is then closed
	// and counted slow; 0: none.
	SendTimeout time.Duration
	// MaxConnections caps the connections held at once, and the HTTP/2
	// requests served at once (one connection carries many); 0: no cap.
	MaxConnections int
	// Metrics receives the connection metrics; nil: none.
	Metrics *metrics.Metrics
	// ErrorLog receives net/http's own errors; nil: the log package's.
	ErrorLog *log.Logger
}

// Server returns an http.Server for h on ln with o's limits, and the
// wrapped listener to pass to its Serve. Its HTTP/1 connections close
// after a request whose framing another hop may have read another way
// (chunked; HTTP/1.0 keep-alive): see closeDoubtful.
func Server(ln net.Listener, h http.Handler, o Options) (*http.Server, *Listener) {
	m := o.Metrics.Listener(o.Name)
	wl := Wrap(ln, o.MaxConnections, m)
	wl.send = o.SendTimeout
	srv := &http.Server{
		Handler:           closeDoubtful(capStreams(stallH2(BodyTimeout(h, o.BodyReadTimeout, m), o.SendTimeout), o.MaxConnections, m)),
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		IdleTimeout:       o.IdleTimeout,
		ConnState:         wl.ConnState,
		ConnContext:       connContext,
		ErrorLog:          o.ErrorLog,
	}
	return srv, wl
}

// capStreams answers 503 at once to an HTTP/2 request that comes while
// max are being served, over all the listener's connections. HTTP/1
// serves one request per connection at a time, so the connection cap
// bounds its requests; an HTTP/2 connection carries up to 250 at once,
// each a goroutine (and through the proxy an upstream connection) held as
// long as its body trickles in, so without this the connection cap let
// 250 times as many run. max <= 0 returns h.
func capStreams(h http.Handler, max int, m *metrics.Listener) http.Handler {
	if max <= 0 {
		return h
	}
	var n atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor < 2 {
			h.ServeHTTP(w, r)
			return
		}
		if n.Add(1) > int64(max) {
			n.Add(-1)
			m.RequestRefused()
			hd := w.Header()
			hd["Content-Type"] = []string{"application/json"}
			hd["Retry-After"] = []string{"1"}
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"error":"overloaded"}`+"\n")
			return
		}
		defer n.Add(-1)
		h.ServeHTTP(w, r)
	})
}
