package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// store.redis.tls is true, false, or a mapping of files, which turns TLS
// on; the files are relative to the config file, as api.tls's are.
func TestRedisTLS(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "sluice.yaml")
	abs := filepath.Join(dir, "c.pem")
	for _, f := range []string{"ca.pem", "c.pem", "k.pem"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		tls  string
		want RedisTLS
	}{
		{"false", RedisTLS{}},
		{"true", RedisTLS{On: true}},
		{"{}", RedisTLS{On: true}},
		{"{server_name: redis.internal}", RedisTLS{On: true, ServerName: "redis.internal"}},
		{"{ca: ca.pem, cert: " + abs + ", key: k.pem}", RedisTLS{On: true, CA: filepath.Join(dir, "ca.pem"), Cert: abs, Key: filepath.Join(dir, "k.pem")}},
	} {
		data := "store:\n  type: redis\n  redis:\n    addrs: [127.0.0.1:6379]\n    tls: " + tc.tls + "\n"
		cfg, err := Parse(file, []byte(data))
		if err != nil {
			t.Errorf("tls: %s: %v", tc.tls, err)
			continue
		}
		if got := cfg.Store.Redis.TLS; got != tc.want {
			t.Errorf("tls: %s = %+v, want %+v", tc.tls, got, tc.want)
		}
	}
	for _, tc := range []struct{ tls, want string }{
		{"maybe", `:5: store.redis.tls: want true or false, or a mapping of ca, cert, key and server_name, not the string "maybe"`},
		{"[a]", ":5: store.redis.tls: want true or false, or a mapping of ca, cert, key and server_name, not a list"},
		{"{cert: c.pem}", ":5: store.redis.tls.key: missing: cert and key go together (a client certificate and its private key)"},
		{"{crt: c.pem}", `:5: store.redis.tls.crt: unknown key (did you mean "cert"?)`},
	} {
		data := "store:\n  type: redis\n  redis:\n    addrs: [127.0.0.1:6379]\n    tls: " + tc.tls + "\n"
		_, err := Parse(file, []byte(data))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("tls: %s: error %v, want it to hold %q", tc.tls, err, tc.want)
		}
	}
}
