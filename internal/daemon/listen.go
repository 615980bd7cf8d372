package daemon

import (
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/h1"
	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/logthrottle"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/internal/tlsconf"
)

// listen binds the listeners and makes the servers, whose handlers
// delegate to the generation in force.
//
// With TLS, the connection cap and the slow-client accounting sit under
// the TLS layer (they count and time raw connections), and net/http
// bounds the handshake by read_header_timeout; gRPC bounds it by its
// connection timeout.
func (d *Daemon) listen(cfg *config.Config) error {
	if err := cfg.TLSProblems(); err != nil {
		return err
	}
	ln, err := listenOn(cfg.Listen)
	if err != nil {
		return fmt.Errorf("daemon: listen (decision API): %w", err)
	}
	// net/http's own errors, a failed TLS handshake's line for one, come
	// from clients, one a connection: at most one a second of each kind.
	errLog := logthrottle.NewLogLogger(d.log, slog.LevelDebug, d.opts.Now, "TLS handshake error")
	// A connection beyond max_connections is answered 503 (under TLS
	// after its handshake): a gateway takes a closed one for Sluice down,
	// which its fail-open config lets through
	// (listener.Listener.AnswerRefused).
	apiOpts := listenerOptions("api", &cfg.API.Listener, d.metrics, errLog)
	apiOpts.AnswerRefused = true
	d.apiSrv, d.apiLn = listener.Server(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.cur.Load().api.ServeHTTP(w, r)
	}), apiOpts)
	if d.apiServe, err = d.serveTLS("api", d.apiLn, cfg.API.TLS); err != nil {
		return err
	}
	if cfg.API.TLS == nil {
		// The health checks, GETs, and POSTs whose Content-Length body
		// came whole with the head (a /v1/check) take the front; the rest
		// is handed to apiSrv. The handler enforces limits.max_body_bytes
		// either way (413); the front's bound only decides which path
		// serves a body.
		d.apiFront = h1.New(d.apiSrv)
		d.apiFront.MaxBody = cfg.Limits.MaxBodyBytes
		// Its handlers answer within the store's timeout (forward auth
		// held by action delay asks for h1.Watch, which writes the held
		// answers first): answers to pipelined requests may go out together.
		d.apiFront.BatchAnswers = apiBatchAnswers
	}
	if cfg.Proxy != nil {
		if ln, err = net.Listen("tcp", cfg.Proxy.Listen); err != nil {
			return fmt.Errorf("daemon: listen (proxy.listen): %w", err)
		}
		proxyOpts := listenerOptions("proxy", &cfg.Proxy.Listener, d.metrics, errLog)
		proxyOpts.AnswerRefused = true
		d.proxySrv, d.proxyLn = listener.Server(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			d.cur.Load().proxy.ServeHTTP(w, r)
		}), proxyOpts)
		if d.proxyServe, err = d.serveTLS("proxy", d.proxyLn, cfg.Proxy.TLS); err != nil {
			return err
		}
		if cfg.Proxy.TLS == nil {
			// Plaintext: the fast HTTP/1.1 front serves the simple
			// requests and hands the rest to proxySrv (package h1).
			d.proxyFront = h1.New(d.proxySrv)
		}
	}
	if cfg.GRPC != nil {
		if ln, err = listenOn(cfg.GRPC.Listen); err != nil {
			return fmt.Errorf("daemon: listen (grpc.listen): %w", err)
		}
		// The connection cap, send timeout (server.DefaultSendTimeout:
		// the grpc block has no key for it) and accounting of the HTTP
		// listeners, and the TCP_USER_TIMEOUT grpc-go sets on a bare TCP
		// listener's connections only; gRPC itself bounds the handshake, streams per
		// connection, message size and keepalive pings
		// (server.GRPCOptions).
		d.grpcLn = listener.Wrap(ln, cfg.GRPC.MaxConnections, server.DefaultSendTimeout, d.metrics.Listener("grpc")).
			WithUserTimeout(server.DefaultKeepaliveTimeout)
		gopts := server.GRPCOptions{Logger: d.log}
		if t := cfg.GRPC.TLS; t != nil {
			r, err := tlsconf.NewReloadable(t.Options(), "h2")
			if err != nil {
				return fmt.Errorf("daemon: grpc.tls: %w", err)
			}
			d.addTLS("grpc", r)
			gopts.TLS = r.Config()
		}
		g := server.NewGRPC(d.rls, gopts)
		d.grpcSrv = g
		_ = d.metrics.GaugeFunc("sluice_grpc_calls_waiting", "gRPC calls on the grpc listener whose request has not come yet, over all its connections.",
			func() float64 { return float64(g.Calls()) })
		_ = d.metrics.CounterFunc("sluice_grpc_calls_refused_total", "gRPC calls refused (RESOURCE_EXHAUSTED) because the grpc listener held its most calls waiting for their request, or, for health and reflection calls, which count until they end, half that.",
			func() float64 { return float64(g.CallsRefused()) })
		_ = d.metrics.CounterFunc("sluice_grpc_connections_closed_unread_total", "gRPC connections closed because more of their answers than the listener keeps waited for the client's flow-control window: over 100 for 10 s on end, or, when all connections together leave over 10,000 waiting, those waiting longest, at once.",
			func() float64 { return float64(g.ClosedUnread()) })
		_ = d.metrics.GaugeFunc("sluice_grpc_request_bytes_waiting", "Bytes of gRPC requests received on the grpc listener whose request has not come whole yet (nor been reset), over all its connections.",
			func() float64 { return float64(g.RequestBytes()) })
		_ = d.metrics.CounterFunc("sluice_grpc_connections_closed_request_bytes_total", "gRPC connections closed because the requests not yet whole over all connections of the grpc listener held more than 64 MiB: those whose oldest unfinished request began first, at once.",
			func() float64 { return float64(g.ClosedRequestBytes()) })
	}
	return nil
}

// scheme is the URL scheme of a listener on addr with t: none for a
// Unix socket, whose address (unix:/PATH) says what it is.
func scheme(addr string, t *config.TLSConfig) string {
	if _, unix := config.UnixPath(addr); unix {
		return ""
	}
	if t != nil {
		return "https://"
	}
	return "http://"
}

// serveTLS returns ln, or with t a TLS listener over it, for the listener
// named name; the connections ln refuses over its cap are then answered
// over TLS too.
func (d *Daemon) serveTLS(name string, ln *listener.Listener, t *config.TLSConfig) (net.Listener, error) {
	if t == nil {
		return ln, nil
	}
	r, err := tlsconf.NewReloadable(t.Options(), "h2", "http/1.1")
	if err != nil {
		return nil, fmt.Errorf("daemon: %s.tls: %w", name, err)
	}
	d.addTLS(name, r)
	return ln.TLS(r.Config()), nil
}

// listenerOptions are the client-side limits of the listener block l.
func listenerOptions(name string, l *config.Listener, m *metrics.Metrics, errLog *log.Logger) listener.Options {
	return listener.Options{
		Name:              name,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		BodyReadTimeout:   l.BodyReadTimeout,
		IdleTimeout:       l.IdleTimeout,
		SendTimeout:       l.SendTimeout,
		MaxConnections:    l.MaxConnections,
		Metrics:           m,
		ErrorLog:          errLog,
	}
}

// apiBatchAnswers is how many answers to pipelined requests the decision
// API writes at once at most (h1.Server.BatchAnswers).
const apiBatchAnswers = 16
