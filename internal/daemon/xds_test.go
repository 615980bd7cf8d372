package daemon

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/doctest"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

const xdsNodeID = "sluice-test"

// xdsServer is a real xDS management server (go-control-plane's, over a
// snapshot cache, as Envoy Gateway runs) on 127.0.0.1:0; reqs receives
// every DiscoveryRequest it is sent.
type xdsServer struct {
	t     *testing.T
	addr  string
	cache cachev3.SnapshotCache
	reqs  chan *discovery.DiscoveryRequest
	opts  []grpc.ServerOption
	mu    sync.Mutex
	srv   *grpc.Server
}

func startXDSServer(t *testing.T, opts ...grpc.ServerOption) *xdsServer {
	t.Helper()
	x := &xdsServer{t: t, cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil), reqs: make(chan *discovery.DiscoveryRequest, 100), opts: opts}
	x.serve("127.0.0.1:0")
	t.Cleanup(x.stop)
	return x
}

// serve (re)starts the server on addr.
func (x *xdsServer) serve(addr string) {
	x.t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		x.t.Fatal(err)
	}
	cb := serverv3.CallbackFuncs{StreamRequestFunc: func(_ int64, r *discovery.DiscoveryRequest) error {
		x.reqs <- r
		return nil
	}}
	srv := grpc.NewServer(x.opts...)
	discovery.RegisterAggregatedDiscoveryServiceServer(srv, serverv3.NewServer(context.Background(), x.cache, cb))
	x.mu.Lock()
	x.addr, x.srv = ln.Addr().String(), srv
	x.mu.Unlock()
	go srv.Serve(ln)
}

func (x *xdsServer) stop() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.srv.Stop()
}

// set makes version, holding configs, the snapshot of the test's node.
func (x *xdsServer) set(version string, configs ...*rlsconf.RateLimitConfig) {
	x.t.Helper()
	rs := make([]types.Resource, len(configs))
	for i, c := range configs {
		rs[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: rs})
	if err != nil {
		x.t.Fatal(err)
	}
	if err := x.cache.SetSnapshot(context.Background(), xdsNodeID, snap); err != nil {
		x.t.Fatal(err)
	}
}

// waitRequest returns the first request the server receives for which ok
// holds (the requests before it are dropped).
func (x *xdsServer) waitRequest(what string, ok func(*discovery.DiscoveryRequest) bool) *discovery.DiscoveryRequest {
	x.t.Helper()
	deadline := time.NewTimer(30 * time.Second) // a failure's bound, not a synchronisation
	defer deadline.Stop()
	for {
		select {
		case r := <-x.reqs:
			if ok(r) {
				return r
			}
		case <-deadline.C:
			x.t.Fatalf("the xDS server received no %s", what)
		}
	}
}

// waitACK waits for the daemon's ACK of version: the config is in force.
func (x *xdsServer) waitACK(version string) {
	x.t.Helper()
	x.waitRequest("ACK of "+version, func(r *discovery.DiscoveryRequest) bool {
		return r.GetResponseNonce() != "" && r.GetErrorDetail() == nil && r.GetVersionInfo() == version
	})
}

func rlc(name, domain string, ds ...*rlsconf.RateLimitDescriptor) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: name, Domain: domain, Descriptors: ds}
}

func perDay(key, value string, n uint32) *rlsconf.RateLimitDescriptor {
	return &rlsconf.RateLimitDescriptor{Key: key, Value: value,
		RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_DAY, RequestsPerUnit: n}}
}

// startXDSDaemon runs the daemon, on the memory store, with its
// descriptors from x; more is added to the grpc.xds block.
func startXDSDaemon(t *testing.T, x *xdsServer, more ...string) *envoyDaemon {
	t.Helper()
	yaml := "listen: 127.0.0.1:0\ngrpc:\n  listen: 127.0.0.1:0\n  xds:\n    server: " + x.addr +
		"\n    node_id: " + xdsNodeID + "\n    node_metadata: {zone: test}\n    retry: 10ms\n"
	for _, m := range more {
		yaml += "    " + m + "\n"
	}
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	// Limits per day, decided at a fixed noon: no window ends under a test.
	noon := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	return dialEnvoy(t, startDaemonWith(t, path, func(o *Options) { o.Now = func() time.Time { return noon } }))
}

// code asks domain about one descriptor, counting one hit.
func (ed *envoyDaemon) code(domain string, kv ...string) rlsv3.RateLimitResponse_Code {
	ed.t.Helper()
	return ed.ask(domain, entries(kv...)).OverallCode
}

// limitOf returns the limit that applies to one descriptor of domain, 0
// for none.
func (ed *envoyDaemon) limitOf(domain string, kv ...string) uint32 {
	ed.t.Helper()
	d := entries(kv...)
	d.HitsAddend = nil
	r := ed.ask(domain, d)
	if len(r.Statuses) == 0 || r.Statuses[0].CurrentLimit == nil {
		return 0
	}
	return r.Statuses[0].CurrentLimit.RequestsPerUnit
}

func TestXDSConfigApplied(t *testing.T) {
	x := startXDSServer(t)
	ed := startXDSDaemon(t, x)
	first := x.waitRequest("subscription", func(r *discovery.DiscoveryRequest) bool { return r.GetResponseNonce() == "" })
	if first.GetTypeUrl() != resource.RateLimitConfigType || first.GetNode().GetId() != xdsNodeID ||
		first.GetNode().GetMetadata().GetFields()["zone"].GetStringValue() != "test" {
		t.Fatalf("subscription %v: want type %s, node %s with zone test", first, resource.RateLimitConfigType, xdsNodeID)
	}
	if r := get(t, ed.api+"/readyz"); r.status != 503 || !strings.Contains(r.body, "xDS") {
		t.Fatalf("/readyz before the first config = %d %q, want 503 naming the xDS server", r.status, r.body)
	}
	// Until then, the service answers UNAVAILABLE: Envoy's
	// failure_mode_deny decides, as while the reference service waits.
	if _, err := ed.rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*commonv3.RateLimitDescriptor{entries("tenant", "acme")}}); status.Code(err) != codes.Unavailable {
		t.Fatalf("ShouldRateLimit before the first config = %v, want UNAVAILABLE", err)
	}
	if r := do(t, "POST", ed.api+"/json", `{"domain":"shop","descriptors":[{"entries":[{"key":"tenant","value":"acme"}]}]}`); r.status != 503 {
		t.Fatalf("POST /json before the first config = %d %q, want 503", r.status, r.body)
	}
	// The probes pass, as they do on the reference service as Envoy
	// Gateway deploys it (FORCE_START_WITHOUT_INITIAL_CONFIG=true, healthy
	// without a config): its startup and liveness probes, on
	// /healthcheck, must not restart a pod whose server has no rate limit
	// config to send yet.
	if r := get(t, ed.api+"/healthcheck"); r.status != 200 || r.body != "OK" {
		t.Fatalf("/healthcheck before the first config = %d %q, want 200 OK", r.status, r.body)
	}
	ed.wantHealth("ratelimit", healthpb.HealthCheckResponse_SERVING)

	x.set("v1",
		rlc("shop", "shop", perDay("tenant", "acme", 2),
			&rlsconf.RateLimitDescriptor{Key: "region", Descriptors: []*rlsconf.RateLimitDescriptor{perDay("user", "", 1)}}),
		rlc("edge", "edge", &rlsconf.RateLimitDescriptor{Key: "path", Value: "/free",
			RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true}}, perDay("path", "/login", 1)))
	x.waitACK("v1")
	if r := get(t, ed.api+"/readyz"); r.status != 200 {
		t.Fatalf("/readyz after the first config = %d %q, want 200", r.status, r.body)
	}
	if r := get(t, ed.api+"/healthcheck"); r.status != 200 || r.body != "OK" {
		t.Fatalf("/healthcheck after the first config = %d %q, want 200 OK", r.status, r.body)
	}
	ed.wantHealth("ratelimit", healthpb.HealthCheckResponse_SERVING)
	ed.wantHealth("", healthpb.HealthCheckResponse_SERVING)
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if got := ed.code("shop", "tenant", "acme"); got != want {
			t.Errorf("shop tenant=acme, request %d: %v, want %v", i+1, got, want)
		}
	}
	if got := ed.code("shop", "region", "eu", "user", "ann"); got != rlsv3.RateLimitResponse_OK {
		t.Errorf("shop nested region/user, first: %v, want OK", got)
	}
	if got := ed.code("shop", "region", "eu", "user", "ann"); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("shop nested region/user, second: %v, want OVER_LIMIT", got)
	}
	for range 3 {
		if got := ed.code("edge", "path", "/free"); got != rlsv3.RateLimitResponse_OK {
			t.Fatalf("edge path=/free (unlimited): %v, want OK", got)
		}
	}
	ed.code("edge", "path", "/login")
	if got := ed.code("edge", "path", "/login"); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("edge path=/login, second: %v, want OVER_LIMIT", got)
	}
	if got := ed.limitOf("other", "tenant", "acme"); got != 0 {
		t.Errorf("an unknown domain: limit %d, want none", got)
	}

	// A new version replaces the config live: shop's tenant limit
	// changes, edge goes.
	x.set("v2", rlc("shop", "shop", perDay("tenant", "acme", 7)))
	x.waitACK("v2")
	if got := ed.limitOf("shop", "tenant", "acme"); got != 7 {
		t.Errorf("after v2, shop tenant=acme limit %d, want 7", got)
	}
	if got := ed.limitOf("edge", "path", "/login"); got != 0 {
		t.Errorf("after v2, edge (removed) limit %d, want none", got)
	}
}

func TestXDSInvalidConfigNACKed(t *testing.T) {
	x := startXDSServer(t)
	ed := startXDSDaemon(t, x)
	x.set("v1", rlc("shop", "shop", perDay("tenant", "acme", 2)))
	x.waitACK("v1")
	reloads := ed.metric("sluice_config_reloads_total", "result", "failure")

	// A unit left out, and a domain given twice: each named.
	x.set("v2",
		rlc("shop", "shop", perDay("tenant", "acme", 9)),
		rlc("shop-again", "shop", perDay("user", "", 1)),
		rlc("bad", "edge", &rlsconf.RateLimitDescriptor{Key: "tenant", Value: "acme",
			RateLimit: &rlsconf.RateLimitPolicy{RequestsPerUnit: 9}}))
	nack := x.waitRequest("NACK", func(r *discovery.DiscoveryRequest) bool { return r.GetErrorDetail() != nil })
	msg := nack.GetErrorDetail().GetMessage()
	for _, want := range []string{`RateLimitConfig "bad": descriptors[0].rate_limit.unit: missing`, `RateLimitConfig "shop-again": domain: domain "shop" is already configured`} {
		if !strings.Contains(msg, want) {
			t.Errorf("NACK error_detail %q: want it to say %q", msg, want)
		}
	}
	if nack.GetVersionInfo() != "v1" {
		t.Errorf("NACK version_info %q, want v1 (the version in force)", nack.GetVersionInfo())
	}
	if got := ed.limitOf("shop", "tenant", "acme"); got != 2 {
		t.Errorf("after the NACK, shop tenant=acme limit %d, want 2 (v1 stays)", got)
	}

	// Fixed, it is applied.
	x.set("v3", rlc("shop", "shop", perDay("tenant", "acme", 4)))
	x.waitACK("v3")
	if got := ed.limitOf("shop", "tenant", "acme"); got != 4 {
		t.Errorf("after v3, shop tenant=acme limit %d, want 4", got)
	}
	// Refused once, counted once, however often the server sent v2
	// again meanwhile.
	if got := ed.metric("sluice_config_reloads_total", "result", "failure"); got != reloads+1 {
		t.Errorf("sluice_config_reloads_total{result=failure} = %v, want %v", got, reloads+1)
	}
}

func TestXDSServerRestart(t *testing.T) {
	x := startXDSServer(t)
	ed := startXDSDaemon(t, x)
	x.set("v1", rlc("shop", "shop", perDay("tenant", "acme", 2)))
	x.waitACK("v1")

	addr := x.addr
	x.stop()
	// The server gone, the daemon answers with the config in force, and
	// stays ready.
	if got := ed.code("shop", "tenant", "acme"); got != rlsv3.RateLimitResponse_OK {
		t.Errorf("server down, first request: %v, want OK", got)
	}
	ed.code("shop", "tenant", "acme")
	if got := ed.code("shop", "tenant", "acme"); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("server down, third request: %v, want OVER_LIMIT (v1's limit of 2)", got)
	}
	if r := get(t, ed.api+"/readyz"); r.status != 200 {
		t.Errorf("/readyz with the xDS server down = %d %q, want 200 (a config is in force)", r.status, r.body)
	}
	// Tried again and again while the server is away.
	broken := func() int { return strings.Count(ed.logs.String(), `msg="xDS subscription broken`) }
	for deadline := time.Now().Add(30 * time.Second); broken() < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon logged %d broken subscriptions in 30s with the server away, want it to try again within every retry (10ms)", broken())
		}
		time.Sleep(5 * time.Millisecond) // polling the condition, not waiting for it to happen
	}

	// Back on the same address with a new version: the daemon subscribes
	// again, saying the version it holds, and applies the new one.
	x.set("v2", rlc("shop", "shop", perDay("tenant", "acme", 5)))
	x.serve(addr)
	again := x.waitRequest("new subscription", func(r *discovery.DiscoveryRequest) bool { return r.GetResponseNonce() == "" })
	if again.GetVersionInfo() != "v1" || again.GetNode().GetId() != xdsNodeID {
		t.Errorf("new subscription: version %q node %q, want v1 and %s", again.GetVersionInfo(), again.GetNode().GetId(), xdsNodeID)
	}
	x.waitACK("v2")
	if got := ed.limitOf("shop", "tenant", "acme"); got != 5 {
		t.Errorf("after the restart, shop tenant=acme limit %d, want 5", got)
	}
	// The outage is told once, at WARN, however many times the daemon
	// tried meanwhile, and its end at INFO.
	logs := ed.logs.String()
	if n := strings.Count(logs, `level=WARN msg="xDS subscription broken`); n != 1 {
		t.Errorf("the outage logged %d times at WARN, want once", n)
	}
	if n := strings.Count(logs, `msg="xDS server answers"`); n != 2 {
		t.Errorf("the server's answers logged %d times, want twice (at the start, after the outage)", n)
	}
}

// A reload of the config file keeps the descriptors from the xDS server;
// grpc.xds needs a restart to change.
func TestXDSConfigFileReload(t *testing.T) {
	x := startXDSServer(t)
	ed := startXDSDaemon(t, x)
	x.set("v1", rlc("shop", "shop", perDay("tenant", "acme", 2)))
	x.waitACK("v1")
	data, err := os.ReadFile(ed.path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ed.path, append(data, "  response_headers: true\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ed.d.Reload(); err != nil {
		t.Fatalf("Reload with response_headers added: %v", err)
	}
	if !ed.d.Config().GRPC.ResponseHeaders {
		t.Fatal("after the reload, grpc.response_headers is not in force")
	}
	if got := ed.limitOf("shop", "tenant", "acme"); got != 2 {
		t.Errorf("after a reload of the config file, shop tenant=acme limit %d, want 2 (the xDS server's)", got)
	}
	changed := strings.Replace(string(data), "retry: 10ms", "retry: 20ms", 1)
	if err := os.WriteFile(ed.path, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ed.d.Reload(); err == nil || !strings.Contains(err.Error(), "grpc.xds") {
		t.Errorf("Reload with grpc.xds.retry changed = %v, want a refusal naming grpc.xds", err)
	}
	if got := ed.limitOf("shop", "tenant", "acme"); got != 2 {
		t.Errorf("after a refused reload, shop tenant=acme limit %d, want 2", got)
	}
}

// grpc.xds.tls: the subscription is made over TLS to a server that
// requires a client certificate signed by its CA, and verifies the
// server's for server_name.
func TestXDSOverMutualTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "xds-ca")
	srvCert := ca.Server(t)
	client := ca.Client(t, "sluice", []string{"sluice"})
	x := startXDSServer(t, grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{srvCert.TLS},
		ClientCAs:    ca.Pool(),
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	})))
	ed := startXDSDaemon(t, x, "tls: {ca: "+ca.File+", cert: "+client.CertFile+", key: "+client.KeyFile+", server_name: localhost}")
	x.set("v1", rlc("shop", "shop", perDay("tenant", "acme", 3)))
	x.waitACK("v1")
	if got := ed.limitOf("shop", "tenant", "acme"); got != 3 {
		t.Errorf("over mTLS, shop tenant=acme limit %d, want 3", got)
	}
}

// wantHealth checks the gRPC health status of service.
func (ed *envoyDaemon) wantHealth(service string, want healthpb.HealthCheckResponse_ServingStatus) {
	ed.t.Helper()
	conn, err := grpc.NewClient(ed.d.Addrs().GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		ed.t.Fatal(err)
	}
	defer conn.Close()
	r, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: service})
	if err != nil || r.GetStatus() != want {
		ed.t.Fatalf("gRPC health of %q = %v, %v; want %v", service, r.GetStatus(), err, want)
	}
}

// TestEnvoyGatewayExample: the example of examples/envoy-gateway loads
// (with the certificate files it names made beside it) and takes its
// descriptors from the xDS server it says.
func TestEnvoyGatewayExample(t *testing.T) {
	text, err := os.ReadFile("../../examples/envoy-gateway/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(doctest.WriteConfig(t, t.TempDir(), string(text)))
	if err != nil {
		t.Fatalf("config.Load: %v", err)
	}
	if err := config.Unsupported(cfg); err != nil {
		t.Fatalf("Unsupported: %v", err)
	}
	if err := cfg.TLSProblems(); err != nil {
		t.Fatalf("TLSProblems: %v", err)
	}
	x := cfg.GRPC.XDS
	if x == nil || x.Server != "envoy-gateway:18001" || x.NodeID != "envoy-ratelimit" || x.TLS == nil || cfg.GRPC.Config != nil {
		t.Fatalf("grpc = %+v, want the descriptors from envoy-gateway:18001, node envoy-ratelimit, over TLS", cfg.GRPC)
	}
	if cfg.GRPC.TLS == nil || cfg.GRPC.TLS.ClientCA == "" {
		t.Errorf("grpc.tls = %+v, want mTLS for the proxies' calls, as Envoy Gateway's deployment serves them", cfg.GRPC.TLS)
	}
}
