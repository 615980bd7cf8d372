package daemon

import (
	"net/netip"
	"time"

	"github.com/sluicehq/sluice/internal/rules"
)

// Config is the daemon's configuration: the YAML of SPEC §4, decoded
// strictly by ParseConfig, with defaults applied and checked by Validate.
// docs/config.md documents every key.
//
// Parsed and validated but not yet enforced by the daemon: GRPC (Envoy rate
// limit service), rules' Sync and Shards, store.on_error "local" with
// ExpectedInstances, action "defer", and the hot keys listing.
type Config struct {
	// File is the path the config was read from ("" for the built-in
	// example); relative paths in the config are resolved against its
	// directory.
	File string

	// Listen is the address of the decision API, /metrics, /healthz and
	// /readyz. Default "127.0.0.1:8080".
	Listen string
	// LogLevel is debug, info (default), warn or error.
	LogLevel string
	// ShutdownTimeout bounds how long a graceful shutdown waits for
	// in-flight requests. Default 10s.
	ShutdownTimeout time.Duration

	Proxy       *ProxyConfig // nil: no reverse proxy
	GRPC        *GRPCConfig  // nil: no gRPC service (not yet enforced)
	Store       StoreConfig
	ClientIP    ClientIPConfig
	ForwardAuth ForwardAuthConfig
	Limits      LimitsConfig
	Rules       []rules.Spec
}

// ProxyConfig is the reverse proxy: requests to Listen go to Upstream.
type ProxyConfig struct {
	Listen   string // required, host:port
	Upstream string // required, an absolute http or https URL
	// DialTimeout bounds connecting to the upstream. Default 5s.
	DialTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for the upstream's response
	// headers once the request is sent. Default 60s; the body streams
	// without a deadline.
	ResponseHeaderTimeout time.Duration
	// ReadHeaderTimeout bounds reading a client's request headers.
	// Default 10s.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes idle client keep-alive connections. Default 120s.
	IdleTimeout time.Duration
}

// GRPCConfig is the Envoy rate limit service (SPEC §6). Not yet enforced.
type GRPCConfig struct {
	Listen string   // required, host:port
	Config []string // Envoy-format descriptor files, resolved against the config's directory
}

// StoreConfig selects where counters live.
type StoreConfig struct {
	Type  string // "memory" (default) or "redis"
	Redis RedisConfig
	// OnError is what happens when the store cannot decide: "allow"
	// (default, fail open), "deny" (fail closed, 503) or "local" (an
	// in-memory limit of rate/ExpectedInstances; not yet enforced).
	OnError string
	// ExpectedInstances is how many daemons share the Redis store; used by
	// on_error: local. Default 1.
	ExpectedInstances int
	// MaxKeys caps the keys the memory store holds; 0 means the memstore
	// default.
	MaxKeys int
}

// RedisConfig is the Redis (or Redis Cluster) store.
type RedisConfig struct {
	Addrs    []string      // host:port; required for type redis; several need Cluster
	Cluster  bool          // Redis Cluster
	Timeout  time.Duration // per operation; default 50ms
	Username string
	Password string // use ${ENV} rather than writing it in the file
	DB       int    // database number; must be 0 with Cluster
	TLS      bool
	// KeyPrefix is prepended to every key. Default "sluice:".
	KeyPrefix string
}

// ClientIPConfig says whose forwarding headers to believe.
type ClientIPConfig struct {
	// TrustedProxies are the CIDRs (or single addresses) of proxies whose
	// X-Forwarded-For / Forwarded headers are read. Empty: nobody's.
	TrustedProxies []netip.Prefix
}

// ForwardAuthConfig is the /v1/forward-auth endpoint.
type ForwardAuthConfig struct {
	// DenyStatus is the status of a limited answer, 400–599. Default 429
	// (use 403 for nginx auth_request, which treats 429 as an error).
	DenyStatus int
}

// LimitsConfig bounds what the daemon accepts.
type LimitsConfig struct {
	// MaxBodyBytes bounds a decision API request body. Default 65536.
	MaxBodyBytes int64
}

// ConfigErrors is every problem ParseConfig found, in line order; each
// prints as FILE:LINE: KEY: MSG. Use errors.As to get at it.
type ConfigErrors = rules.ParseErrors

// LoadConfig reads and parses the config file at path.
func LoadConfig(path string) (*Config, error) {
	// TODO
	return nil, nil
}

// ParseConfig parses data, the contents of file, applies the defaults and
// validates the result. The error, if any, is ConfigErrors.
func ParseConfig(file string, data []byte) (*Config, error) {
	// TODO
	return nil, nil
}

// ExampleConfig returns the built-in example config that `sluice serve`
// runs without -config.
func ExampleConfig() []byte {
	// TODO
	return nil
}
