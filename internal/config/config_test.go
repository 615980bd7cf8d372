package config

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/proxy"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/internal/server"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files of testdata/config")

// configEnv sets and unsets the environment variables the fixtures use.
func configEnv(t testing.TB) {
	if t, ok := t.(*testing.T); ok {
		t.Setenv("SLUICE_TEST_REDIS_PASSWORD", "s3cret")
		t.Setenv("SLUICE_TEST_PORT", "")
		for _, v := range []string{"SLUICE_TEST_UNSET_HOST", "SLUICE_TEST_UNSET_PASSWORD"} {
			t.Setenv(v, "") // restores on cleanup
			os.Unsetenv(v)
		}
	}
}

// TestConfigGolden loads every testdata/config/*.yaml and compares what
// `sluice check-config` would print with the .golden file beside it: the
// problems, one per line, or "ok".
func TestConfigGolden(t *testing.T) {
	configEnv(t)
	files, err := filepath.Glob("testdata/config/*.yaml")
	if err != nil || len(files) < 20 {
		t.Fatalf("fixtures: %d files, %v", len(files), err)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		t.Run(name, func(t *testing.T) {
			cfg, err := Load(file)
			var got string
			if err != nil {
				var ces Errors
				if !errors.As(err, &ces) {
					t.Fatalf("Load(%s) error %T is not Errors: %v", file, err, err)
				}
				for _, e := range ces {
					if e.File != file || e.Msg == "" {
						t.Errorf("Load(%s): problem %+v: want File %q and a message", file, e, file)
					}
					if e.Line == 0 && name != "empty" {
						t.Errorf("Load(%s): problem %q has no line", file, e)
					}
				}
				got = err.Error() + "\n"
				if strings.HasPrefix(name, "ok-") {
					t.Errorf("Load(%s) = %v, want no error", file, err)
				}
			} else {
				if cfg == nil {
					t.Fatalf("Load(%s) = nil, nil", file)
				}
				if !strings.HasPrefix(name, "ok-") {
					t.Errorf("Load(%s) = ok, want problems", file)
				}
				if err := cfg.Validate(); err != nil {
					t.Errorf("Load(%s).Validate() = %v, want nil", file, err)
				}
				got = "ok\n"
			}
			golden := strings.TrimSuffix(file, ".yaml") + ".golden"
			if *updateGolden {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -run TestConfigGolden -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("Load(%s) problems:\n%s\nwant (%s):\n%s", file, got, golden, want)
			}
		})
	}
}

func TestExampleConfig(t *testing.T) {
	cfg, err := Parse("example.yaml", Example())
	if err != nil {
		t.Fatalf("Parse(Example()) = %v", err)
	}
	if cfg.Listen != "127.0.0.1:8080" || cfg.Store.Type != "memory" || cfg.Proxy != nil {
		t.Errorf("example: listen %q store %q proxy %v, want 127.0.0.1:8080, memory, none", cfg.Listen, cfg.Store.Type, cfg.Proxy)
	}
	set, err := cfg.RuleSet()
	if err != nil {
		t.Fatalf("example RuleSet() = %v", err)
	}
	r := set.Rule("demo-per-ip")
	if r == nil {
		t.Fatal(`example: no rule "demo-per-ip"`)
	}
	if r.Limit.Rate != 5 || r.Limit.Period != time.Minute || len(r.Key) != 1 || r.Key[0].Kind != rules.PartIP || r.Action != rules.Reject {
		t.Errorf("example demo-per-ip = %+v, want 5/m per ip, reject", r)
	}
	// Example hands out a copy.
	b := Example()
	b[0] = 'X'
	if Example()[0] == 'X' {
		t.Error("Example() returned shared memory")
	}
}

func TestParseConfigFull(t *testing.T) {
	configEnv(t)
	const file = "testdata/config/ok-full.yaml"
	cfg, err := Load(file)
	if err != nil {
		t.Fatalf("Load(%s) = %v", file, err)
	}
	want := &Config{
		File:            file,
		Listen:          "127.0.0.1:8080",
		LogLevel:        "debug",
		ShutdownTimeout: 15 * time.Second,
		API: APIConfig{
			Listener: Listener{
				ReadHeaderTimeout: 5 * time.Second, BodyReadTimeout: 30 * time.Second, IdleTimeout: time.Minute, SendTimeout: listener.DefaultSendTimeout, MaxConnections: 10000,
				TLS: &TLSConfig{Cert: "testdata/config/tls/server.pem", Key: "testdata/config/tls/server-key.pem",
					ClientCA: "testdata/config/tls/ca.pem", ClientSANs: []string{"gw.example"}},
			},
			TokenFile: "testdata/config/api-token",
		},
		Proxy: &ProxyConfig{
			Listen: "127.0.0.1:8000", Upstream: "http://127.0.0.1:9000",
			DialTimeout: 2 * time.Second, ResponseHeaderTimeout: 30 * time.Second, TunnelIdleTimeout: 10 * time.Minute,
			Listener: Listener{ReadHeaderTimeout: 5 * time.Second, BodyReadTimeout: 20 * time.Second, IdleTimeout: time.Minute, SendTimeout: listener.DefaultSendTimeout, MaxConnections: 5000,
				TLS: &TLSConfig{Cert: "testdata/config/tls/server.pem", Key: "testdata/config/tls/server-key.pem"}},
		},
		GRPC: &GRPCConfig{Listen: "127.0.0.1:8081", Config: []string{"testdata/config/envoy/ratelimit.yaml"},
			TLS: &TLSConfig{Cert: "testdata/config/tls/server.pem", Key: "testdata/config/tls/server-key.pem",
				ClientCA: "testdata/config/tls/ca.pem", ClientSANs: []string{"envoy.example"}},
			MaxConnections: 10000},
		Store: StoreConfig{
			Type: "redis",
			Redis: RedisConfig{
				Addrs:   []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"},
				Cluster: true, Timeout: 20 * time.Millisecond, Username: "sluice", Password: "secret",
				TLS: RedisTLS{On: true}, KeyPrefix: "rl:",
			},
			OnError: "local", ExpectedInstances: 4, MaxKeys: 500000,
		},
		ClientIP: ClientIPConfig{TrustedProxies: []TrustedProxy{
			{Prefix: netip.MustParsePrefix("10.0.0.0/8")}, {Prefix: netip.MustParsePrefix("fd00::/8")}, {Prefix: netip.MustParsePrefix("192.168.1.7/32")},
		}, IPv6Prefix: 56, IPv4Prefix: 24},
		ForwardAuth: ForwardAuthConfig{DenyStatus: 403},
		Limits:      LimitsConfig{MaxBodyBytes: 4096},
		Defer: DeferConfig{ClaimIdle: time.Minute, DeliveryTimeout: 15 * time.Second, MaxAttempts: 8,
			Backoff: 500 * time.Millisecond, MaxBackoff: 2 * time.Minute, Concurrency: 32, StatusTTL: 48 * time.Hour},
	}
	for key, line := range map[string]int{"store.redis.db": 29, "grpc": 23, "grpc.config[0]": 25, "rules[1].sync": 64, "rules[1]": 57, "store.redis.nope": 29, "nope": 0, "api.tls.client_sans[0]": 10} {
		if got := cfg.Line(key); got != line {
			t.Errorf("Line(%q) = %d, want %d", key, got, line)
		}
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if sum, ok := cfg.Digest(); !ok || sum != sha256.Sum256(data) {
		t.Errorf("Digest() = %x, %v; want the SHA-256 of the file, true", sum, ok)
	}
	got := *cfg
	got.Rules = nil
	got.lines, got.set = nil, nil
	got.digest, got.parsed = [sha256.Size]byte{}, false
	if !reflect.DeepEqual(&got, want) {
		t.Errorf("Load(%s) =\n%+v\nwant\n%+v", file, &got, want)
	}

	if len(cfg.Rules) != 5 {
		t.Fatalf("Load(%s): %d rules, want 5", file, len(cfg.Rules))
	}
	sp := cfg.Rules[1]
	if sp.Name != "api-per-key" || sp.Match.Path != "/api/*" || !reflect.DeepEqual(sp.Key, []string{"header:X-Api-Key", "method"}) ||
		sp.Rate != "100/s" || sp.Burst != 200 || sp.Algorithm != "gcra" || sp.Action != "shadow" ||
		sp.Sync != 50*time.Millisecond || sp.Shards != (rules.AutoCount{N: 4}) {
		t.Errorf("rules[1] = %+v", sp)
	}
	if sp.Line != 57 || sp.Lines["rate"] != 60 || sp.Lines["key[1]"] != 59 || sp.Lines["match.path"] != 58 {
		t.Errorf("rules[1] lines: Line %d, Lines %v; want 57, rate 60, key[1] 59, match.path 58", sp.Line, sp.Lines)
	}
	if r := cfg.Rules[2]; !r.Match.CaseInsensitive {
		t.Errorf("rules[2].match.case_insensitive = false, want true")
	}
	if r := cfg.Rules[3]; r.Lease != (rules.AutoCount{Auto: true}) || r.Defer == nil || *r.Defer != (rules.DeferSpec{MaxBodyBytes: 1 << 20, MaxQueue: 10000}) {
		t.Errorf("rules[3]: lease %v, defer %+v; want auto, {1048576 10000}", r.Lease, r.Defer)
	}
	if r := cfg.Rules[4]; r.Lease != (rules.AutoCount{N: 500}) || r.Shards != (rules.AutoCount{Auto: true}) || r.Defer != nil {
		t.Errorf("rules[4]: lease %v, shards %v, defer %v; want 500, auto, nil", r.Lease, r.Shards, r.Defer)
	}

	set, err := cfg.RuleSet()
	if err != nil {
		t.Fatalf("RuleSet() = %v", err)
	}
	checks := []struct {
		rule   string
		alg    sluice.Algorithm
		limit  sluice.Limit
		action rules.Action
		delay  time.Duration
	}{
		{"login-per-ip", sluice.SlidingWindowCounter, sluice.Limit{Rate: 5, Period: time.Minute, Burst: 5, Segments: 6}, rules.Reject, 0},
		{"api-per-key", sluice.GCRA, sluice.Limit{Rate: 100, Period: time.Second, Burst: 200, Segments: 1}, rules.Shadow, 0},
		{"uploads", sluice.LeakyBucket, sluice.Limit{Rate: 2, Period: time.Second, Burst: 2, Segments: 1}, rules.Delay, 2 * time.Second},
		{"search", sluice.FixedWindow, sluice.Limit{Rate: 30, Period: time.Minute, Burst: 30, Segments: 1}, rules.Defer, 0},
		{"global", rules.DefaultAlgorithm, sluice.Limit{Rate: 10000, Period: time.Second, Burst: 10000, Segments: 1}, rules.Reject, 0},
	}
	for _, c := range checks {
		r := set.Rule(c.rule)
		if r == nil {
			t.Errorf("Rule(%q) = nil", c.rule)
			continue
		}
		if r.Algorithm != c.alg || r.Limit != c.limit || r.Action != c.action || r.MaxDelay != c.delay {
			t.Errorf("Rule(%q) = %v %+v %v max_delay %v, want %v %+v %v %v", c.rule, r.Algorithm, r.Limit, r.Action, r.MaxDelay, c.alg, c.limit, c.action, c.delay)
		}
	}
	if got := set.Rule("uploads").Methods; !reflect.DeepEqual(got, []string{"PUT", "POST"}) {
		t.Errorf("uploads methods = %v, want [PUT POST]", got)
	}
}

func TestParseConfigDefaults(t *testing.T) {
	cfg, err := Parse("min.yaml", []byte("rules: [{name: a, rate: 1/s}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != DefaultListen || cfg.LogLevel != "info" || cfg.Store.Type != "memory" || cfg.Store.OnError != "allow" ||
		cfg.Store.ExpectedInstances != 1 || cfg.ForwardAuth.DenyStatus != 429 || cfg.Limits.MaxBodyBytes != server.DefaultMaxBodyBytes ||
		cfg.Proxy != nil || cfg.GRPC != nil || cfg.ShutdownTimeout != 0 {
		t.Errorf("defaults: %+v", cfg)
	}
	if want := (DeferConfig{ClaimIdle: deferq.DefaultClaimIdle, DeliveryTimeout: deferq.DefaultDeliveryTimeout,
		MaxAttempts: deferq.DefaultMaxAttempts, Backoff: deferq.DefaultBackoff, MaxBackoff: deferq.DefaultMaxBackoff,
		Concurrency: deferq.DefaultConcurrency, StatusTTL: deferq.DefaultStatusTTL}); cfg.Defer != want {
		t.Errorf("defer defaults: %+v, want %+v", cfg.Defer, want)
	}
	// A short claim_idle brings the delivery timeout's default under half of it.
	cfg, err = Parse("short.yaml", []byte("defer: {claim_idle: 3s}\nrules: [{name: a, rate: 1/s}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Defer.DeliveryTimeout != time.Second {
		t.Errorf("defer.delivery_timeout default with claim_idle 3s: %v, want 1s", cfg.Defer.DeliveryTimeout)
	}
	cfg, err = Parse("redis.yaml", []byte("store: {type: redis, redis: {addrs: [r:6379]}}\nproxy: {listen: \":8000\", upstream: https://api.example.com/v1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Store.Redis.Timeout != 50*time.Millisecond || cfg.Store.Redis.KeyPrefix != "sluice:" {
		t.Errorf("redis defaults: %+v", cfg.Store.Redis)
	}
	if p := cfg.Proxy; p.DialTimeout != proxy.DefaultDialTimeout || p.ResponseHeaderTimeout != proxy.DefaultResponseHeaderTimeout ||
		p.ReadHeaderTimeout != server.DefaultReadHeaderTimeout || p.IdleTimeout != server.DefaultIdleTimeout ||
		p.SendTimeout != listener.DefaultSendTimeout || cfg.API.SendTimeout != listener.DefaultSendTimeout {
		t.Errorf("proxy defaults: %+v", p)
	}
}

func TestConfigEnvExpansion(t *testing.T) {
	t.Setenv("SLUICE_T_SET", "v1")
	t.Setenv("SLUICE_T_EMPTY", "")
	t.Setenv("SLUICE_T_BURST", "7")
	t.Setenv("SLUICE_T_BOOL", "true")
	t.Setenv("SLUICE_T_DUR", "75ms")
	t.Setenv("SLUICE_T_UNSET", "")
	os.Unsetenv("SLUICE_T_UNSET")
	tests := []struct {
		value   string // the password
		want    string
		wantErr string
	}{
		{`plain`, "plain", ""},
		{`${SLUICE_T_SET}`, "v1", ""},
		{`a-${SLUICE_T_SET}-b-${SLUICE_T_SET}`, "a-v1-b-v1", ""},
		{`${SLUICE_T_EMPTY}`, "", ""},
		{`${SLUICE_T_UNSET:-fallback}`, "fallback", ""},
		{`${SLUICE_T_EMPTY:-fallback}`, "fallback", ""},
		{`${SLUICE_T_SET:-fallback}`, "v1", ""},
		{`pa$$word$`, "pa$$word$", ""},
		{`$${SLUICE_T_SET}`, "${SLUICE_T_SET}", ""},
		{`${SLUICE_T_UNSET}`, "", "p.yaml:3: store.redis.password: environment variable SLUICE_T_UNSET is not set"},
		{`${SLUICE_T_SET`, "", "p.yaml:3: store.redis.password: unterminated ${"},
		{`${1BAD}`, "", `p.yaml:3: store.redis.password: ${1BAD}: "1BAD" is not an environment variable name`},
		// A nested default is not supported: refused, not half-expanded
		// into "${SLUICE_T_SET" or "v1}".
		{`${SLUICE_T_UNSET:-${SLUICE_T_SET}}`, "", "p.yaml:3: store.redis.password: ${SLUICE_T_UNSET:-…}: a ${ inside a default is not supported"},
		{`${SLUICE_T_SET:-${SLUICE_T_UNSET}}`, "", "p.yaml:3: store.redis.password: ${SLUICE_T_SET:-…}: a ${ inside a default is not supported"},
	}
	for _, tt := range tests {
		data := "store:\n  redis:\n    password: '" + tt.value + "'\n    addrs: [h:1]\n  type: redis\n"
		cfg, err := Parse("p.yaml", []byte(data))
		switch {
		case tt.wantErr != "":
			if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
				t.Errorf("Parse(password %s) error = %v, want %q", tt.value, err, tt.wantErr)
			}
		case err != nil:
			t.Errorf("Parse(password %s) = %v", tt.value, err)
		case cfg.Store.Redis.Password != tt.want:
			t.Errorf("Parse(password %s): password %q, want %q", tt.value, cfg.Store.Redis.Password, tt.want)
		}
	}

	// Numbers, booleans and durations may come from the environment too.
	cfg, err := Parse("t.yaml", []byte("store: {type: redis, redis: {addrs: [h:1], tls: '${SLUICE_T_BOOL}', timeout: '${SLUICE_T_DUR}'}}\nrules: [{name: a, rate: '${SLUICE_T_BURST}/s', burst: '${SLUICE_T_BURST}'}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Store.Redis.TLS.On || cfg.Store.Redis.Timeout != 75*time.Millisecond || cfg.Rules[0].Burst != 7 || cfg.Rules[0].Rate != "7/s" {
		t.Errorf("expanded: tls %v timeout %v burst %d rate %q", cfg.Store.Redis.TLS, cfg.Store.Redis.Timeout, cfg.Rules[0].Burst, cfg.Rules[0].Rate)
	}
}

func TestConfigErrorsCollectsAll(t *testing.T) {
	// Problems from decoding stop validation; problems of validation are
	// all reported together, with the rules' problems in line order.
	data := "listen: nowhere\nstore: {type: mysql}\nrules:\n  - {name: a, rate: 1/x}\n  - {name: a, rate: 1/s}\n"
	_, err := Parse("c.yaml", []byte(data))
	var ces Errors
	if !errors.As(err, &ces) {
		t.Fatalf("Parse error %T %v, want Errors", err, err)
	}
	var pe *rules.ParseError
	if !errors.As(err, &pe) || pe.Line != 1 {
		t.Errorf("errors.As(*ParseError) = %v, want the line-1 problem", pe)
	}
	want := []string{
		`c.yaml:1: listen: "nowhere": want host:port, such as 127.0.0.1:8080 or :8080`,
		`c.yaml:2: store.type: unknown store "mysql" (want memory or redis)`,
		`c.yaml:4: rules[0].rate: "1/x": unit "x" is not s, m, h, d or a Go duration`,
		`c.yaml:5: rules[1].name: duplicate rule name "a" (first used at line 4)`,
	}
	if got := strings.Split(err.Error(), "\n"); !reflect.DeepEqual(got, want) {
		t.Errorf("Parse problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestLoadConfigMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	var ces Errors
	if !errors.As(err, &ces) || len(ces) != 1 || !strings.Contains(ces[0].Msg, "no such file") {
		t.Errorf("Load(missing) = %v, want one Errors problem naming the missing file", err)
	}
}

// TestTokenFileBounded: api.token_file holds one bearer token. A file
// far larger (a log, a key bundle named by mistake) is refused by name,
// without being read whole, at startup and on every reload.
func TestTokenFileBounded(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 20); err != nil { // sparse
		t.Fatal(err)
	}
	f.Close()
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, []byte("api:\n  token_file: token\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load(path)
	if err == nil || !strings.Contains(err.Error(), "api.token_file") || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("Load with a 64 MiB token file = %v, want a problem at api.token_file naming its size", err)
	}
	if _, err := ReadToken(filepath.Join(dir, "token")); err == nil {
		t.Error("ReadToken of a 64 MiB file: nil error, want too large")
	}
}

func TestConfigAliasBomb(t *testing.T) {
	// 500 aliases of a rule whose key is an alias of a 500-item list: a
	// small file that expands to 250,000 values. The node budget stops it.
	var b bytes.Buffer
	b.WriteString("x-key: &k [")
	for i := 0; i < 500; i++ {
		b.WriteString("ip, ")
	}
	b.WriteString("ip]\nx-rule: &r {name: a, rate: 1/s, key: *k}\nrules: [")
	for i := 0; i < 500; i++ {
		b.WriteString("*r, ")
	}
	b.WriteString("*r]\n")
	_, err := Parse("bomb.yaml", b.Bytes())
	var ces Errors
	if !errors.As(err, &ces) || !strings.Contains(err.Error(), "config too large") {
		t.Fatalf("Parse(alias bomb) = %.300v, want a 'config too large' problem", err)
	}
	if len(ces) > maxProblems+1 {
		t.Errorf("Parse(alias bomb): %d problems, want at most %d", len(ces), maxProblems+1)
	}
}

// FuzzParseConfig checks that Parse never panics and returns either
// a valid Config or Errors whose every problem names the file.
func FuzzParseConfig(f *testing.F) {
	files, _ := filepath.Glob("testdata/config/*.yaml")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add(Example())
	// store.redis.tls: a boolean, a mapping, or neither.
	for _, tls := range []string{"true", "{}", "{ca: a.pem, cert: c.pem}", "maybe", "[x]", "&t {server_name: r}", "${SLUICE_TEST_UNSET_TLS:-true}"} {
		f.Add([]byte("store:\n  type: redis\n  redis:\n    addrs: [127.0.0.1:6379]\n    tls: " + tls + "\n"))
	}
	// grpc.xds.node_metadata: a mapping of strings, or not.
	for _, md := range []string{"{}", "{a: b, c: 1}", "~", "[a]", "{a: {b: c}}", "&m {a: b}", "{<<: {a: b}}", "{\"\": x}"} {
		f.Add([]byte("grpc:\n  listen: 127.0.0.1:0\n  xds:\n    server: h:1\n    node_metadata: " + md + "\n"))
	}
	f.Add([]byte("grpc:\n  listen: 127.0.0.1:0\n  xds:\n    server: h:1\n    tls: {ca: a.pem, cert: c.pem, key: k.pem}\n"))
	// Unix sockets, and trusted_proxies' unix: entry, quoted or not.
	f.Add([]byte("listen: unix:/tmp/a.sock\nclient_ip: {trusted_proxies: [unix:, 10.0.0.0/8, \"unix:\", {unix: 1}, unix:/x]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		// What a reload waits for: read of any config, never a panic.
		NamedFiles("fuzz.yaml", data)
		cfg, err := Parse("fuzz.yaml", data)
		if err != nil {
			var ces Errors
			if !errors.As(err, &ces) || len(ces) == 0 {
				t.Fatalf("Parse error %T %v is not a non-empty Errors", err, err)
			}
			for _, e := range ces {
				if e.File != "fuzz.yaml" || e.Msg == "" {
					t.Fatalf("problem %+v lacks file or message", e)
				}
				utf16 := bytes.HasPrefix(data, []byte{0xFF, 0xFE}) || bytes.HasPrefix(data, []byte{0xFE, 0xFF})
				if strings.HasPrefix(e.Msg, "YAML syntax") && e.Line == 0 && !utf16 {
					t.Fatalf("problem %q names no line", e)
				}
			}
			if cfg != nil {
				t.Fatal("Parse returned a Config and an error")
			}
			return
		}
		if cfg == nil {
			t.Fatal("Parse returned nil, nil")
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("valid config fails Validate: %v", err)
		}
		if _, err := cfg.RuleSet(); err != nil {
			t.Fatalf("valid config fails RuleSet: %v", err)
		}
	})
}

func ExampleParse() {
	cfg, err := Parse("sluice.yaml", []byte(`
listen: 127.0.0.1:8080
rules:
  - name: login-per-ip
    match: {methods: [POST], path: /login}
    rate: 5/m
    algoritm: gcra
`))
	fmt.Println(cfg, err)

	cfg, err = Parse("sluice.yaml", []byte("rules: [{name: login-per-ip, rate: 5/m}]\n"))
	fmt.Println(cfg.Listen, cfg.Store.Type, cfg.Rules[0].Name, err)
	// Output:
	// <nil> sluice.yaml:7: rules[0].algoritm: unknown key (did you mean "algorithm"?)
	// 127.0.0.1:8080 memory login-per-ip <nil>
}

// TestClientIPPrefixesReachRules: client_ip.ipv6_prefix and ipv4_prefix
// decide what an ip key counts; by default an IPv6 /64 and an IPv4 address.
func TestClientIPPrefixesReachRules(t *testing.T) {
	for _, tc := range []struct {
		yaml, addr, want string
	}{
		{"", "2001:db8:1:2::9", "2001:db8:1:2::/64"},
		{"", "192.0.2.9", "192.0.2.9"},
		{"client_ip: {ipv6_prefix: 48}\n", "2001:db8:1:2::9", "2001:db8:1::/48"},
		{"client_ip: {ipv6_prefix: 128}\n", "2001:db8:1:2::9", "2001:db8:1:2::9"},
		{"client_ip: {ipv4_prefix: 24}\n", "192.0.2.9", "192.0.2.0/24"},
	} {
		c, err := Parse("t.yaml", []byte(tc.yaml+"rules:\n  - {name: r, rate: 1/s, key: [ip]}\n"))
		if err != nil {
			t.Fatalf("Parse(%q): %v", tc.yaml, err)
		}
		set, err := c.RuleSet()
		if err != nil {
			t.Fatal(err)
		}
		r := set.Rules[0]
		req, _ := http.NewRequest("GET", "http://x/", nil)
		k, ok := r.KeyFor(req, netip.MustParseAddr(tc.addr))
		if got := strings.TrimPrefix(k, r.Name+"|"+r.Fingerprint+"|"); !ok || got != tc.want {
			t.Errorf("%q: key of %s = %q, %v; want %q", tc.yaml, tc.addr, got, ok, tc.want)
		}
	}
}

// TestSendTimeout: send_timeout reads in api: and proxy: alike, and
// defaults to listener.DefaultSendTimeout in each.
func TestSendTimeout(t *testing.T) {
	configEnv(t)
	cfg, err := Load("testdata/config/ok-send.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.API.SendTimeout != 90*time.Second || cfg.Proxy.SendTimeout != 15*time.Second {
		t.Errorf("send_timeout: api %v, proxy %v; want 90s, 15s", cfg.API.SendTimeout, cfg.Proxy.SendTimeout)
	}
	for _, bad := range []string{"api: {send_timeout: 2h}\n", "api: {send_timeout: -1s}\n", "api: {send_timeout: 0s}\n"} {
		if _, err := Parse("x.yaml", []byte(bad)); err == nil || !strings.Contains(err.Error(), "api.send_timeout") {
			t.Errorf("Parse(%q) = %v, want a problem naming api.send_timeout", bad, err)
		}
	}
}
