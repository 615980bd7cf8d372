package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Connection metrics, per listener (api, proxy, grpc):
//
//	sluice_connections_open{listener}              client connections held now
//	sluice_connections_closed_slow_total{listener} closed because the client was too slow
//	                                               (headers or body not sent in time, answer not taken)
//	sluice_connections_refused_total{listener}     refused at max_connections
//	sluice_requests_refused_total{listener}        HTTP/2 requests refused at max_connections places held
//	                                               (connections, and HTTP/2 requests beyond one per connection)
//	sluice_body_timeouts_total{listener}           request bodies cut by body_read_timeout
//	sluice_connections_closed_resets_total{listener}
//	                                               HTTP/2 connections closed for resetting requests early (rapid reset;
//	                                               the figures are internal/listener's, minResetCheck and earlyReset)
type connCollectors struct {
	open                               *prometheus.GaugeVec
	slow, refused, reqs, bodyT, resets *prometheus.CounterVec
}

func (m *Metrics) conns() *connCollectors {
	m.connsOnce.Do(func() {
		c := &connCollectors{
			open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
				Name: "sluice_connections_open",
				Help: "Client connections held now, per listener.",
			}, []string{"listener"}),
			slow: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "sluice_connections_closed_slow_total",
				Help: "Client connections closed because the client was too slow: headers not sent within read_header_timeout, a request body stalled for body_read_timeout, or an answer not taken for send_timeout (10s on the grpc listener).",
			}, []string{"listener"}),
			refused: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "sluice_connections_refused_total",
				Help: "Client connections refused (answered 503 and closed, under TLS after the handshake; or closed at once on the grpc listener, and past 256 being answered at once or 1 s) because max_connections were held.",
			}, []string{"listener"}),
			reqs: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "sluice_requests_refused_total",
				Help: "HTTP/2 requests answered 503 at once because the listener held max_connections places: its connections, and its HTTP/2 requests in flight beyond the first on each connection.",
			}, []string{"listener"}),
			bodyT: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "sluice_body_timeouts_total",
				Help: "Request bodies cut because no data came for body_read_timeout.",
			}, []string{"listener"}),
			resets: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "sluice_connections_closed_resets_total",
				Help: "HTTP/2 connections closed because, once they had carried 500 requests, the client had reset more than half of them early, within 1s of their start (rapid reset, CVE-2023-44487).",
			}, []string{"listener"}),
		}
		if m.reg != nil {
			m.reg.MustRegister(c.open, c.slow, c.refused, c.reqs, c.bodyT, c.resets)
		}
		m.connC = c
	})
	return m.connC
}

// Listener holds the connection metrics of one listener. A nil *Listener
// records nothing.
type Listener struct {
	open                               prometheus.Gauge
	slow, refused, reqs, bodyT, resets prometheus.Counter
}

// Listener returns the connection metrics of the listener named name
// ("api", "proxy", "grpc"). Calling it again with the same name returns
// collectors that count together. A nil m returns nil.
func (m *Metrics) Listener(name string) *Listener {
	if m == nil {
		return nil
	}
	c := m.conns()
	return &Listener{
		open:    c.open.WithLabelValues(name),
		slow:    c.slow.WithLabelValues(name),
		refused: c.refused.WithLabelValues(name),
		reqs:    c.reqs.WithLabelValues(name),
		bodyT:   c.bodyT.WithLabelValues(name),
		resets:  c.resets.WithLabelValues(name),
	}
}

// Opened counts a connection accepted.
func (l *Listener) Opened() {
	if l != nil {
		l.open.Inc()
	}
}

// Closed counts a connection closed; slow says it was closed because the
// client was too slow.
func (l *Listener) Closed(slow bool) {
	if l != nil {
		l.open.Dec()
		if slow {
			l.slow.Inc()
		}
	}
}

// Refused counts a connection refused at the cap.
func (l *Listener) Refused() {
	if l != nil {
		l.refused.Inc()
	}
}

// RequestRefused counts an HTTP/2 request refused at the cap.
func (l *Listener) RequestRefused() {
	if l != nil {
		l.reqs.Inc()
	}
}

// BodyTimeout counts a request body cut by body_read_timeout.
func (l *Listener) BodyTimeout() {
	if l != nil {
		l.bodyT.Inc()
	}
}

// ResetFlood counts an HTTP/2 connection closed for resetting its
// requests early.
func (l *Listener) ResetFlood() {
	if l != nil {
		l.resets.Inc()
	}
}
