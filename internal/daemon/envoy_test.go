package daemon

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/descriptors"
	"github.com/sluicehq/sluice/internal/redistest"
)

// Limits per year: a window boundary never falls inside a test.
const envoyDescriptors = `domain: shop
descriptors:
  - key: tenant
    descriptors:
      - key: user
        rate_limit: {unit: year, requests_per_unit: 3}
  - key: tenant
    value: vip
    descriptors:
      - key: user
        rate_limit: {unit: year, requests_per_unit: 5}
  - key: region
    rate_limit: {unit: year, requests_per_unit: 100}
  - key: path
    value: /img/*
    algorithm: sliding_window_counter
    rate_limit: {unit: year, requests_per_unit: 2}
`

type envoyDaemon struct {
	*testDaemon
	rls  rlsv3.RateLimitServiceClient
	dir  string // the descriptor directory
	conf string // the descriptor file in it
}

// startEnvoyDaemon starts the daemon with the Envoy service on :0, the
// descriptor directory holding envoyDescriptors, and store (a YAML store
// block, or "" for memory).
func startEnvoyDaemon(t *testing.T, store string) *envoyDaemon {
	t.Helper()
	dir := t.TempDir()
	descDir := filepath.Join(dir, "ratelimit")
	if err := os.Mkdir(descDir, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(descDir, "shop.yaml")
	if err := os.WriteFile(conf, []byte(envoyDescriptors), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sluice.yaml")
	yaml := "listen: 127.0.0.1:0\ngrpc:\n  listen: 127.0.0.1:0\n  config: [ratelimit]\n" + store
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	ed := dialEnvoy(t, startDaemonFile(t, path))
	ed.dir, ed.conf = descDir, conf
	return ed
}

// dialEnvoy is td with a client of its Envoy service (plain gRPC), closed
// when the test ends.
func dialEnvoy(t *testing.T, td *testDaemon) *envoyDaemon {
	t.Helper()
	conn, err := grpc.NewClient(td.d.Addrs().GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &envoyDaemon{testDaemon: td, rls: rlsv3.NewRateLimitServiceClient(conn)}
}

// startEnvoyRedis starts the daemon on a fresh Redis, with the Envoy
// service on :0 and the descriptor file fleet.yaml, holding descriptors,
// in dir. Its store.redis.timeout is 10s, as newHotPair's: a call cut
// short by a loaded machine's pause is decided on on_error (allow), and a
// test's count is off.
func startEnvoyRedis(t *testing.T, dir, descriptors string) (*envoyDaemon, *redistest.Server) {
	t.Helper()
	return startEnvoyRedisTimeout(t, dir, descriptors, "10s")
}

// startEnvoyRedisTimeout is startEnvoyRedis with store.redis.timeout
// timeout, for a test about that timeout.
func startEnvoyRedisTimeout(t *testing.T, dir, descriptors, timeout string) (*envoyDaemon, *redistest.Server) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "fleet.yaml"), []byte(descriptors), 0o644); err != nil {
		t.Fatal(err)
	}
	redis := redistest.StartServer(t)
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, []byte("listen: 127.0.0.1:0\ngrpc:\n  listen: 127.0.0.1:0\n  config: [fleet.yaml]\nstore:\n  type: redis\n  redis: {addrs: ["+redis.Addr+"], timeout: "+timeout+"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dialEnvoy(t, startDaemonFile(t, path)), redis
}

func entries(kv ...string) *commonv3.RateLimitDescriptor {
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func (ed *envoyDaemon) ask(domain string, ds ...*commonv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	ed.t.Helper()
	r, err := ed.rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds})
	if err != nil {
		ed.t.Fatalf("ShouldRateLimit(%s): %v", domain, err)
	}
	return r
}

// left returns what remains of a descriptor's limit, asking with
// hits_addend 0 (nothing counted).
func (ed *envoyDaemon) left(kv ...string) uint32 {
	ed.t.Helper()
	d := entries(kv...)
	d.HitsAddend = wrapperspb.UInt64(0)
	return ed.ask("shop", d).Statuses[0].LimitRemaining
}

func TestEnvoyServiceEndToEnd(t *testing.T) {
	t.Parallel() // a Cluster (or Redis) and daemons of its own
	for _, kind := range []string{"memory", "redis", "cluster"} {
		t.Run(kind, func(t *testing.T) {
			store := storeBlock(t, kind)
			ed := startEnvoyDaemon(t, store)
			user := func(tenant, u string) *commonv3.RateLimitDescriptor { return entries("tenant", tenant, "user", u) }
			region := entries("region", "eu")
			// Nested, key without value: 3 a year per (tenant, user).
			for i := range 3 {
				if r := ed.ask("shop", user("acme", "ann"), region); r.OverallCode != rlsv3.RateLimitResponse_OK {
					t.Fatalf("request %d: %v", i+1, r)
				}
			}
			r := ed.ask("shop", user("acme", "ann"), region)
			if r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || r.Statuses[1].Code != rlsv3.RateLimitResponse_OK {
				t.Fatalf("fourth request: %v, want OVER_LIMIT by the user descriptor only", r)
			}
			if got := ed.left("region", "eu"); got != 97 {
				t.Errorf("region remaining = %d, want 97: the denied request consumed nothing", got)
			}
			// Each value apart; the vip value matched before the key alone.
			if r := ed.ask("shop", user("acme", "bob")); r.Statuses[0].LimitRemaining != 2 {
				t.Errorf("another user: %v, want 2 of 3 left", r.Statuses[0])
			}
			if r := ed.ask("shop", user("vip", "ann")); r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 5 {
				t.Errorf("vip tenant: %v, want the 5/year limit", r.Statuses[0])
			}
			// A wildcard value with a Sluice algorithm.
			for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
				if r := ed.ask("shop", entries("path", "/img/a.png")); r.OverallCode != want {
					t.Errorf("/img/a.png #%d: %v, want %v", i+1, r.OverallCode, want)
				}
			}
			// The HTTP form on the decision API.
			rep := do(t, "POST", ed.api+"/json", `{"domain":"shop","descriptors":[{"entries":[{"key":"tenant","value":"acme"},{"key":"user","value":"ann"}]}]}`)
			if rep.status != 429 || !strings.Contains(rep.body, `"overallCode":"OVER_LIMIT"`) {
				t.Errorf("POST /json: %d %s, want 429 OVER_LIMIT", rep.status, rep.body)
			}
			if got := ed.metric("sluice_envoy_over_limit_total", "domain", "shop", "descriptor", "tenant.user"); got != 2 {
				t.Errorf("sluice_envoy_over_limit_total{shop, tenant.user} = %v, want 2", got)
			}
		})
	}
}

func TestEnvoyDescriptorsHotReload(t *testing.T) {
	ed := startEnvoyDaemon(t, "")
	ed.ask("shop", entries("region", "us"))
	if got := ed.left("region", "us"); got != 99 {
		t.Fatalf("region remaining = %d, want 99", got)
	}

	// A valid change applies; the unchanged limit keeps its count.
	replaceFile(t, ed.conf, envoyDescriptors+"  - key: coupon\n    rate_limit: {unit: year, requests_per_unit: 1}\n")
	if r := ed.waitReload(); r.Err != nil {
		t.Fatalf("reload: %v", r.Err)
	}
	if got := ed.left("region", "us"); got != 99 {
		t.Errorf("region remaining after reload = %d, want 99 (counters kept)", got)
	}
	if r := ed.ask("shop", entries("coupon", "x")); r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 1 {
		t.Errorf("the new descriptor: %v, want 1/year", r.Statuses[0])
	}

	// A bad file is refused, named with its line, and the old rules stay.
	replaceFile(t, ed.conf, envoyDescriptors+"  - key: coupon\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	r := ed.waitReload()
	if r.Err == nil || !strings.Contains(r.Err.Error(), "shop.yaml:19: descriptors[4].rate_limit.unit: unknown unit \"fortnight\"") {
		t.Fatalf("bad reload: %v, want the file, line and key named", r.Err)
	}
	if got := ed.metric("sluice_config_reloads_total", "result", "failure"); got != 1 {
		t.Errorf("reload failures = %v, want 1", got)
	}
	if r := ed.ask("shop", entries("coupon", "x")); r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 1 {
		t.Errorf("after a refused reload: %v, want the old 1/year limit still", r.Statuses[0])
	}

	// Fixed, it applies.
	replaceFile(t, ed.conf, envoyDescriptors)
	if r := ed.waitReload(); r.Err != nil {
		t.Fatalf("reload of the fixed file: %v", r.Err)
	}
	// A new file in the directory adds its domain. Writing it is two
	// events (create, write): a reload may first see it empty and refuse
	// it; wait for the one that sees it whole.
	if err := os.WriteFile(filepath.Join(ed.dir, "more.yml"), []byte("domain: more\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 7}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for ed.waitReload().Err != nil {
	}
	if r := ed.ask("more", entries("k", "v")); r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 7 {
		t.Errorf("domain of the new file: %v, want 7/year", r.Statuses[0])
	}
}

func TestEnvoyBadDescriptorsAtStartup(t *testing.T) {
	dir := t.TempDir()
	desc := filepath.Join(dir, "rl.yaml")
	os.WriteFile(desc, []byte("domain: d\ndescriptors:\n  - key: k\n    sync: 50ms\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 2}\n"), 0o644)
	path := filepath.Join(dir, "sluice.yaml")
	os.WriteFile(path, []byte("listen: 127.0.0.1:0\ngrpc:\n  listen: 127.0.0.1:0\n  config: [rl.yaml]\n"), 0o644)
	cfg, err := configLoad(path)
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(cfg, Options{})
	if err == nil {
		d.Close()
		t.Fatal("New with a bad descriptor file succeeded")
	}
	if !strings.Contains(err.Error(), "rl.yaml:5: descriptors[0].rate_limit.burst: unknown key") {
		t.Errorf("New: %v, want the file, line and key of the problem", err)
	}
}

var configLoad = config.Load

// TestEnvoyMaxConnections: the gRPC listener holds at most
// grpc.max_connections client connections; one more is closed at once and
// counted, and the connections held keep being answered.
func TestEnvoyMaxConnections(t *testing.T) {
	ed := startEnvoyDaemon(t, "  max_connections: 2\n") // inside the grpc: block
	if got := ed.left("region", "eu"); got != 100 {
		t.Fatalf("first call: %d left, want 100", got)
	}
	addr := ed.d.Addrs().GRPC
	held := rawSend(t, addr, "") // connects and sends nothing
	waitFor(t, "2 gRPC connections held", func() bool { return ed.metric("sluice_connections_open", "listener", "grpc") == 2 })
	extra := rawSend(t, addr, "")
	extra.SetReadDeadline(time.Now().Add(safety))
	if b, err := io.ReadAll(extra); len(b) > 0 || isTimeout(err) {
		t.Errorf("connection beyond grpc.max_connections: read %q, %v; want it closed unanswered", b, err)
	}
	if got := ed.metric("sluice_connections_refused_total", "listener", "grpc"); got != 1 {
		t.Errorf("sluice_connections_refused_total{listener=grpc} = %v, want 1", got)
	}
	if got := ed.left("region", "eu"); got != 100 {
		t.Errorf("call on the held connection: %d left, want 100", got)
	}
	held.Close()
}

// TestEnvoyExample: the example of examples/envoy stays valid, and its
// descriptors mean what its comments say.
func TestEnvoyExample(t *testing.T) {
	cfg, err := config.Load("../../examples/envoy/sluice.yaml")
	if err != nil {
		t.Fatalf("config.Load: %v", err)
	}
	if err := config.Unsupported(cfg); err != nil {
		t.Fatalf("Unsupported: %v", err)
	}
	set, err := LoadDescriptors(cfg)
	if err != nil {
		t.Fatalf("LoadDescriptors: %v", err)
	}
	var m descriptors.Match
	for _, tc := range []struct {
		e    []descriptors.Entry
		want uint32
	}{
		{[]descriptors.Entry{{Key: "remote_address", Value: "10.1.2.3"}}, 10},
		{[]descriptors.Entry{{Key: "remote_address", Value: "50.0.0.5"}}, 0},
		{[]descriptors.Entry{{Key: "route", Value: "/api/users"}, {Key: "api_key", Value: "k1"}}, 100},
	} {
		if !set.Lookup("edge", tc.e, &m) || m.Rule == nil || m.Rule.RequestsPerUnit != tc.want {
			t.Errorf("Lookup(edge, %v) = %+v, want %d per unit", tc.e, m.Rule, tc.want)
		}
	}
}

// TestEnvoyFleetOptions: descriptors with sync, lease and shards count
// through the fleet decorators and Redis shards, as rules do; on the
// memory store they are refused.
func TestEnvoyFleetOptions(t *testing.T) {
	dir := t.TempDir()
	ed, redis := startEnvoyRedis(t, dir, `domain: fleet
descriptors:
  - key: leased
    lease: 2
    rate_limit: {unit: year, requests_per_unit: 5}
  - key: synced
    sync: 20ms
    rate_limit: {unit: year, requests_per_unit: 1000}
  - key: sharded
    shards: 4
    rate_limit: {unit: year, requests_per_unit: 8}
`)
	td := ed.testDaemon

	admitted := func(n int, kv ...string) int {
		ok := 0
		for range n {
			if ed.ask("fleet", entries(kv...)).OverallCode == rlsv3.RateLimitResponse_OK {
				ok++
			}
		}
		return ok
	}
	if got := admitted(8, "leased", "a"); got != 5 {
		t.Errorf("lease: %d of 8 admitted, want exactly the limit, 5 (a hard limit)", got)
	}
	if got := admitted(10, "synced", "a"); got != 10 {
		t.Errorf("sync: %d of 10 admitted under a limit of 1000, want 10", got)
	}
	if got := admitted(20, "sharded", "a"); got < 1 || got > 8 {
		t.Errorf("shards: %d of 20 admitted, want between 1 and the limit, 8 (the shards' shares add up to it)", got)
	}
	for name, mode := range map[string]string{"envoy/fleet/leased": "lease", "envoy/fleet/synced": "sync", "envoy/fleet/sharded": "exact"} {
		if got := td.metric("sluice_rule_fleet_mode", "rule", name, "mode", mode); got != 1 {
			t.Errorf("sluice_rule_fleet_mode{rule=%q, mode=%q} = %v, want 1", name, mode, got)
		}
	}
	keys, err := redistest.Do(redis.Addr, "KEYS", "*")
	if err != nil {
		t.Fatal(err)
	}
	var m descriptors.Match
	td.d.descriptorSet().Lookup("fleet", []descriptors.Entry{{Key: "sharded", Value: "a"}}, &m)
	if n := strings.Count(keys, m.Rule.Head()); n < 2 {
		t.Errorf("Redis keys %q: %d hold the sharded counter (head %q), want it spread over several", keys, n, m.Rule.Head())
	}

	// On the memory store, refused with file and line.
	mem := filepath.Join(dir, "memory.yaml")
	os.WriteFile(mem, []byte("listen: 127.0.0.1:0\ngrpc:\n  listen: 127.0.0.1:0\n  config: [fleet.yaml]\n"), 0o644)
	cfg, err := config.Load(mem)
	if err != nil {
		t.Fatal(err)
	}
	_, err = LoadDescriptors(cfg)
	if err == nil || !strings.Contains(err.Error(), "fleet.yaml:3: leased.lease: counts across a fleet of instances: it needs store.type: redis") {
		t.Errorf("LoadDescriptors on memory: %v, want lease refused with its file and line", err)
	}
}

// TestEnvoyFleetDescriptorReload: a reload of the descriptor files that
// removes a lease descriptor gives the units it held back to Redis and
// retires its Lease, as a config reload does for rules.
func TestEnvoyFleetDescriptorReload(t *testing.T) {
	dir := t.TempDir()
	const plain = "domain: fleet\ndescriptors:\n  - key: plain\n    rate_limit: {unit: year, requests_per_unit: 5}\n"
	ed, redis := startEnvoyRedis(t, dir, plain+"  - key: leased\n    lease: 10\n    rate_limit: {unit: year, requests_per_unit: 100}\n")
	leased := []descriptors.Entry{{Key: "leased", Value: "a"}}
	var m descriptors.Match
	if !ed.d.descriptorSet().Lookup("fleet", leased, &m) {
		t.Fatal("no descriptor for leased")
	}
	key, alg, limit := m.StoreKey(leased), m.Rule.Algorithm, m.Rule.Limit
	// The first decided in Redis, the second reserves 10 and spends one.
	for i := range 2 {
		if r := ed.ask("fleet", entries("leased", "a")); r.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("request %d: %v, want OK", i, r.OverallCode)
		}
	}
	probe := probeRedis(t, redis.Addr)
	if got := countedKey(t, probe, key, alg, limit); got != 11 {
		t.Fatalf("Redis counts %d, want 11 (one decided there, 10 reserved)", got)
	}
	replaceFile(t, filepath.Join(dir, "fleet.yaml"), plain)
	if r := ed.waitReload(); r.Err != nil {
		t.Fatalf("descriptor reload: %v", r.Err)
	}
	if got := countedKey(t, probe, key, alg, limit); got != 2 {
		t.Errorf("Redis counts %d after the descriptor left, want the 2 admitted (9 units given back)", got)
	}
	if heads, _, leases := fleetSizes(ed.d.fleet); heads != 1 || leases != 0 {
		t.Errorf("after the reload: %d routing entries and %d Leases, want 1 (plain) and 0", heads, leases)
	}
}

// TestEnvoyDeniedByFleetDescriptor: a request denied by a lease or sync
// descriptor counts nothing on the others, which the fleet decorator asks
// Redis about without counting; their limit_remaining is what is left, and
// their code what each alone would get: over when its hits do not fit.
func TestEnvoyDeniedByFleetDescriptor(t *testing.T) {
	ed, _ := startEnvoyRedis(t, t.TempDir(), `domain: fleet
descriptors:
  - key: leased
    lease: 2
    rate_limit: {unit: year, requests_per_unit: 1}
  - key: synced
    sync: 1m
    rate_limit: {unit: year, requests_per_unit: 1}
  - key: plain
    rate_limit: {unit: year, requests_per_unit: 10}
`)
	left := func(kv ...string) uint32 {
		d := entries(kv...)
		d.HitsAddend = wrapperspb.UInt64(0)
		return ed.ask("fleet", d).Statuses[0].LimitRemaining
	}
	for _, fleetKey := range []string{"leased", "synced"} {
		user := "u-" + fleetKey
		if r := ed.ask("fleet", entries(fleetKey, user), entries("plain", user)); r.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("%s: first request %v, want OK", fleetKey, r)
		}
		r := ed.ask("fleet", entries(fleetKey, user), entries("plain", user))
		if r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || r.Statuses[1].Code != rlsv3.RateLimitResponse_OK {
			t.Fatalf("%s: second request %v, want over by %s only", fleetKey, r, fleetKey)
		}
		want := left("plain", user)
		if want != 9 {
			t.Fatalf("%s: plain has %d left, want 9 (the denied request counted nothing)", fleetKey, want)
		}
		if got := r.Statuses[1].LimitRemaining; got != want {
			t.Errorf("%s: the denied request's plain limit_remaining = %d, want %d", fleetKey, got, want)
		}
		// 10 hits on plain's 9 left: over on plain too, as plain alone
		// (or on the memory store) says. Another user: the first refusal
		// of its fleet key, asked of the stores (later ones come from the
		// over-limit cache, which asks nothing of the others).
		user += "-2"
		if r := ed.ask("fleet", entries(fleetKey, user), entries("plain", user)); r.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("%s: first request of the second user %v, want OK", fleetKey, r)
		}
		big := entries("plain", user)
		big.HitsAddend = wrapperspb.UInt64(10)
		r = ed.ask("fleet", entries(fleetKey, user), big)
		if r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || r.Statuses[1].Code != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Errorf("%s: 10 hits on plain's 9 left with %s over: %v, want both over", fleetKey, fleetKey, r)
		}
		big.HitsAddend = wrapperspb.UInt64(10)
		if r := ed.ask("fleet", big); r.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("%s: 10 hits on plain's 9 left alone: %v, want over", fleetKey, r)
		}
	}
}

// TestEnvoyGlobalShadowMode: grpc.shadow_mode: true (the reference
// service's SHADOW_MODE) lets every request through, each status still
// saying which limit is over.
func TestEnvoyGlobalShadowMode(t *testing.T) {
	ed := startEnvoyDaemon(t, "  shadow_mode: true\n") // inside the grpc: block
	for i := range 4 {
		r := ed.ask("shop", entries("tenant", "t", "user", "u"))
		want := rlsv3.RateLimitResponse_OK
		if i == 3 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].Code != want {
			t.Errorf("call %d on a limit of 3: %v, status %v; want OK overall, status %v", i+1, r.OverallCode, r.Statuses[0].Code, want)
		}
	}
}
