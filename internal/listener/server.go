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
	// MaxConnections caps the connections held at once; 0: no cap.
	MaxConnections int
	// Metrics receives the connection metrics; nil: none.
	Metrics *metrics.Metrics
	// ErrorLog receives net/http's own errors; nil: the log package's.
	ErrorLog *log.Logger
}

// Server returns an http.Server for h on ln with o's limits, and the
// wrapped listener to pass to its Serve.
func Server(ln net.Listener, h http.Handler, o Options) (*http.Server, *Listener) {
	m := o.Metrics.Listener(o.Name)
	wl := Wrap(ln, o.MaxConnections, m)
	srv := &http.Server{
		Handler:           BodyTimeout(h, o.BodyReadTimeout, m),
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		IdleTimeout:       o.IdleTimeout,
		ConnState:         wl.ConnState,
		ConnContext:       connContext,
		ErrorLog:          o.ErrorLog,
	}
	return srv, wl
}
