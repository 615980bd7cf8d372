package listener

import (
	"log"
	"net"
	"net/http"
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
	// (net/http falls back on ReadTimeout, which Server leaves unset).
	IdleTimeout time.Duration
	// SendTimeout is the longest a write to the client may go without
	// progress (the client reads nothing): the connection is then closed
	// and counted slow; 0: none.
	SendTimeout time.Duration
	// MaxConnections caps the places held at once: a connection holds
	// one, and so does each HTTP/2 request in flight beyond the first on
	// its connection (one connection carries many); 0: no cap.
	MaxConnections int
	// Metrics receives the connection metrics; nil: none.
	Metrics *metrics.Metrics
	// ErrorLog receives net/http's own errors; nil: the log package's.
	ErrorLog *log.Logger
	// AnswerRefused answers a connection beyond MaxConnections 503
	// before closing it (Listener.AnswerRefused); under TLS, serve the
	// Listener's TLS listener (Listener.TLS).
	AnswerRefused bool
}

// Server returns an http.Server for h on ln with o's limits, and the
// wrapped listener to pass to its Serve. Its HTTP/1 connections close
// after a request whose framing another hop may have read another way
// (chunked; HTTP/1.0 keep-alive): see closeDoubtful.
func Server(ln net.Listener, h http.Handler, o Options) (*http.Server, *Listener) {
	m := o.Metrics.Listener(o.Name)
	wl := Wrap(ln, o.MaxConnections, o.SendTimeout, m)
	wl.answer = o.AnswerRefused
	srv := &http.Server{
		Handler:           closeDoubtful(wl.guardResets(wl.capStreams(stallH2(BodyTimeout(h, o.BodyReadTimeout, m), o.SendTimeout)))),
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		IdleTimeout:       o.IdleTimeout,
		ConnState:         wl.ConnState,
		ConnContext:       connContext,
		ErrorLog:          o.ErrorLog,
	}
	return srv, wl
}
