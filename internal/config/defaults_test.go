package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestDefaultValues: the defaults users read in the annotated config, as
// values, not as the constants the code takes them from (a constant changed
// by mistake must fail here), for a config that writes no key but a rule,
// and one with a Redis store and a gRPC block.
func TestDefaultValues(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rl.yaml"), []byte("domain: d\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse(filepath.Join(dir, "min.yaml"), []byte("store: {type: redis, redis: {addrs: [r:6379]}}\ngrpc: {listen: \":8081\", config: [rl.yaml]}\nrules: [{name: a, rate: 5/m}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key       string
		got, want any
	}{
		{"listen", cfg.Listen, "127.0.0.1:8080"},
		{"api.read_header_timeout", cfg.API.ReadHeaderTimeout, 10 * time.Second},
		{"api.body_read_timeout", cfg.API.BodyReadTimeout, 30 * time.Second},
		{"api.idle_timeout", cfg.API.IdleTimeout, 120 * time.Second},
		{"api.max_connections", cfg.API.MaxConnections, 10000},
		{"api.tls", cfg.API.TLS == nil, true},
		{"api.token_file", cfg.API.TokenFile, ""},
		{"grpc.max_connections", cfg.GRPC.MaxConnections, 10000},
		{"grpc.response_headers", cfg.GRPC.ResponseHeaders, false},
		{"store.redis.cluster", cfg.Store.Redis.Cluster, false},
		{"store.redis.sentinel", cfg.Store.Redis.Sentinel, ""},
		{"store.redis.timeout", cfg.Store.Redis.Timeout, 50 * time.Millisecond},
		{"store.on_error", cfg.Store.OnError, "allow"},
		{"store.expected_instances", cfg.Store.ExpectedInstances, 1},
		{"client_ip.trusted_proxies", len(cfg.ClientIP.TrustedProxies), 0},
		{"client_ip.ipv6_prefix", cfg.ClientIP.IPv6Prefix, 64},
		{"client_ip.ipv4_prefix", cfg.ClientIP.IPv4Prefix, 32},
		{"forward_auth.deny_status", cfg.ForwardAuth.DenyStatus, 429},
	} {
		if c.got != c.want {
			t.Errorf("%s: default %v, want %v", c.key, c.got, c.want)
		}
	}
	cfg, err = Parse("memory.yaml", []byte("rules: [{name: a, rate: 5/m}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Store.Type != "memory" {
		t.Errorf("store.type: default %q, want memory", cfg.Store.Type)
	}
	set, err := cfg.RuleSet()
	if err != nil {
		t.Fatal(err)
	}
	// A rule's burst is its rate's N; its action reject.
	if r := set.Rule("a"); r.Limit.BurstOrRate() != 5 || r.Action.String() != "reject" {
		t.Errorf("rule a (rate 5/m): burst %d, action %v; want 5, reject", r.Limit.BurstOrRate(), r.Action)
	}
}
