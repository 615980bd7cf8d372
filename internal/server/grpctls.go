package server

import (
	"crypto/tls"
	"net"
	"slices"

	"google.golang.org/grpc/credentials"
)

// serverTLS are the gRPC listener's TLS credentials: credentials.NewTLS's,
// except that a client which offers no ALPN is served, as speaking HTTP/2
// (prior knowledge). Envoy offers none to an upstream cluster unless its
// UpstreamTlsContext lists alpn_protocols, and grpc-go's own credentials
// close such a connection after the handshake ("missing selected ALPN
// property"), so an Envoy set up as the reference rate limit service's
// docs show could not reach the listener. A client that offers protocols
// but not h2 negotiates none (Go falls back for an http/1.1-only offer)
// and then fails the HTTP/2 preface.
type serverTLS struct {
	credentials.TransportCredentials // Info, ClientHandshake, OverrideServerName
	cfg                              *tls.Config
}

// newServerTLS returns the credentials serving cfg, with h2 offered.
func newServerTLS(cfg *tls.Config) serverTLS {
	cfg = withH2(cfg)
	if get := cfg.GetConfigForClient; get != nil {
		cfg.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			c, err := get(hello)
			if err != nil || c == nil {
				return c, err
			}
			return withH2(c), nil
		}
	}
	return serverTLS{TransportCredentials: credentials.NewTLS(cfg), cfg: cfg}
}

// withH2 returns cfg offering h2, a copy if it has to add it.
func withH2(cfg *tls.Config) *tls.Config {
	if slices.Contains(cfg.NextProtos, "h2") {
		return cfg
	}
	cfg = cfg.Clone()
	cfg.NextProtos = append([]string{"h2"}, cfg.NextProtos...)
	return cfg
}

func (s serverTLS) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn := tls.Server(raw, s.cfg)
	if err := conn.Handshake(); err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, credentials.TLSInfo{
		State:          conn.ConnectionState(),
		CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity},
	}, nil
}

func (s serverTLS) Clone() credentials.TransportCredentials {
	return serverTLS{TransportCredentials: s.TransportCredentials.Clone(), cfg: s.cfg}
}
