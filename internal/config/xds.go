package config

import (
	"time"

	"github.com/sluicehq/sluice/internal/tlsconf"
)

// XDSConfig is grpc.xds: the descriptor config comes from an xDS
// management server (the reference service's CONFIG_TYPE: GRPC_XDS_SOTW,
// as Envoy Gateway programs it) instead of files: a state-of-the-world
// subscription to ratelimit.config.ratelimit.v3.RateLimitConfig over ADS.
// It excludes grpc.config.
type XDSConfig struct {
	// Server is the management server's host:port
	// (CONFIG_GRPC_XDS_SERVER_URL). Required.
	Server string `yaml:"server"`
	// NodeID is the node the server keys its snapshots by
	// (CONFIG_GRPC_XDS_NODE_ID). Default "default", as the reference's.
	NodeID string `yaml:"node_id"`
	// NodeMetadata is the node's metadata, string values
	// (CONFIG_GRPC_XDS_NODE_METADATA).
	NodeMetadata map[string]string `yaml:"node_metadata"`
	// TLS, if set, dials the server over TLS (CONFIG_GRPC_XDS_SERVER_USE_TLS
	// and CONFIG_GRPC_XDS_CLIENT_TLS_*); without it, plaintext.
	TLS *XDSTLS `yaml:"tls"`
	// Retry is the wait before the subscription is made again when the
	// stream breaks or cannot be opened
	// (CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL). Default 3s.
	Retry time.Duration `yaml:"retry"`
}

// XDSTLS is grpc.xds.tls. Without CA the server's certificate is verified
// against the system's roots; with Cert and Key a client certificate is
// presented. Paths are resolved against the config file's directory.
type XDSTLS struct {
	CA   string `yaml:"ca"`   // PEM CA bundle that signs the server's certificate (CONFIG_GRPC_XDS_SERVER_TLS_CACERT)
	Cert string `yaml:"cert"` // PEM client certificate (chain) (CONFIG_GRPC_XDS_CLIENT_TLS_CERT)
	Key  string `yaml:"key"`  // PEM private key of Cert (CONFIG_GRPC_XDS_CLIENT_TLS_KEY)
	// ServerName is the name the server's certificate is verified for
	// (CONFIG_GRPC_XDS_SERVER_TLS_SAN); default the host of Server.
	ServerName string `yaml:"server_name"`
}

// The defaults of grpc.xds, as the reference service's.
const (
	DefaultXDSNodeID = "default"
	DefaultXDSRetry  = 3 * time.Second
	// MaxXDSRetry bounds grpc.xds.retry.
	MaxXDSRetry = 10 * time.Minute
)

// ClientOptions returns t as tlsconf client options.
func (t *XDSTLS) ClientOptions() tlsconf.ClientOptions {
	return tlsconf.ClientOptions{CA: t.CA, Cert: t.Cert, Key: t.Key, ServerName: t.ServerName}
}

func (x *XDSConfig) defaults(file string) {
	setDefault(&x.NodeID, DefaultXDSNodeID)
	setDefault(&x.Retry, DefaultXDSRetry)
	if x.TLS != nil {
		resolvePath(file, &x.TLS.CA)
		resolvePath(file, &x.TLS.Cert)
		resolvePath(file, &x.TLS.Key)
	}
}

func (x *XDSConfig) check(ck *checker) {
	if x.Server == "" {
		ck.fail("grpc.xds.server", "missing: the xDS management server's host:port, such as envoy-gateway.envoy-gateway-system:18001")
	} else {
		ck.addr("grpc.xds.server", x.Server)
	}
	ck.between("grpc.xds.retry", x.Retry, time.Millisecond, MaxXDSRetry)
	for k := range x.NodeMetadata {
		if k == "" {
			ck.fail("grpc.xds.node_metadata", "an empty key: name each metadata field")
		}
	}
	if x.TLS != nil {
		checkClientTLS(ck, "grpc.xds.tls", x.TLS.ClientOptions())
	}
}

// xdsTLSProblems loads grpc.xds.tls's files as the daemon does before it
// dials, and reports each that is not what its key says.
func (c *Config) xdsTLSProblems() Errors {
	if c.GRPC == nil || c.GRPC.XDS == nil || c.GRPC.XDS.TLS == nil {
		return nil
	}
	return c.clientTLSProblems("grpc.xds.tls", c.GRPC.XDS.TLS.ClientOptions())
}
