package server_test

import (
	"context"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/descriptors"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// tMid is 10:00:30 UTC: in the middle of every minute, hour and day
// window, so a test's requests all fall in one window.
var tMid = time.Date(2026, 3, 2, 10, 0, 30, 0, time.UTC)

type rlsEnv struct {
	client rlsv3.RateLimitServiceClient
	conn   *grpc.ClientConn
	http   *httptest.Server
	reg    *prometheus.Registry
	set    *setBox
	rls    *server.RLS // the service itself, for calls a real client cannot make
	grpc   *server.GRPC
	// stop ends the gRPC server gracefully, returning once every call in
	// flight has returned (and Serve with it); it may be called again.
	stop func()
}

type setBox struct {
	mu sync.Mutex
	s  *descriptors.Set
}

func (b *setBox) get() *descriptors.Set  { b.mu.Lock(); defer b.mu.Unlock(); return b.s }
func (b *setBox) put(s *descriptors.Set) { b.mu.Lock(); b.s = s; b.mu.Unlock() }

// storeKinds are the stores every service test runs on.
var storeKinds = []string{"memory", "redis", "cluster"}

func newStore(t testing.TB, kind string) sluice.Store {
	t.Helper()
	switch kind {
	case "memory":
		return memstore.New(memstore.Options{})
	case "redis":
		srv := redistest.StartServer(t)
		st, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatalf("redisstore.New: %v", err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	case "cluster":
		c := redistest.StartCluster(t)
		st, err := redisstore.New(context.Background(), redisstore.Options{Addrs: c.Addrs, Cluster: true, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatalf("redisstore.New(cluster): %v", err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	t.Fatalf("unknown store %q", kind)
	return nil
}

// writeConf writes each YAML source to its own file and loads them all.
func writeConf(t testing.TB, srcs ...string) *descriptors.Set {
	t.Helper()
	dir := t.TempDir()
	var paths []string
	for i, src := range srcs {
		p := filepath.Join(dir, "conf"+string(rune('a'+i))+".yaml")
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	s, err := descriptors.Load(paths)
	if err != nil {
		t.Fatalf("descriptors.Load: %v", err)
	}
	return s
}

type envOpts struct {
	onError      string
	unavailable  bool
	headers      bool
	shadow       bool
	quota        bool
	now          func() time.Time                               // nil: always tMid
	shard        func(r *sluice.Request, n int) int             // engine.Options.Shard
	spread       func(r sluice.Request, n int) []sluice.Request // engine.Options.Spread
	shards       func(r sluice.Request, n int) []sluice.Request // engine.Options.Shards
	storeTimeout time.Duration                                  // engine.Options.StoreTimeout
	grpc         server.GRPCOptions
	log          *slog.Logger // the engine's; nil discards
	// listen wraps the gRPC listener's net.Listener, given the metrics
	// (the daemon's listener.Wrap); nil serves on it as it is.
	listen func(ln net.Listener, m *metrics.Metrics) net.Listener
}

// startRLS serves the rate limit service over a real gRPC listener and
// POST /json over a real HTTP listener, on st, with the clock at tMid.
func startRLS(t testing.TB, st sluice.Store, set *descriptors.Set, o envOpts) *rlsEnv {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	if o.now == nil {
		o.now = func() time.Time { return tMid }
	}
	eng, err := engine.New(engine.Options{Store: st, OnError: o.onError, Metrics: m, Logger: o.log, Now: o.now, Shard: o.shard, Spread: o.spread, Shards: o.shards, StoreTimeout: o.storeTimeout})
	if err != nil {
		t.Fatal(err)
	}
	box := &setBox{s: set}
	rls, err := server.NewRLS(server.RLSOptions{
		Engine: func() *engine.Engine { return eng }, Descriptors: box.get, Metrics: m,
		Headers: o.headers, Unavailable: o.unavailable, Shadow: o.shadow, Quota: o.quota, Now: o.now,
	})
	if err != nil {
		t.Fatal(err)
	}
	g := server.NewGRPC(func() *server.RLS { return rls }, o.grpc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var serve net.Listener = lis
	if o.listen != nil {
		serve = o.listen(lis, m)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, serve) }()
	stop := sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	t.Cleanup(stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	h, err := server.New(server.Options{Engine: func() *engine.Engine { return eng }, Envoy: rls, Gatherer: reg})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return &rlsEnv{client: rlsv3.NewRateLimitServiceClient(conn), conn: conn, http: hs, reg: reg, set: box, rls: rls, grpc: g, stop: stop}
}

// desc builds a request descriptor from key, value pairs.
func desc(kv ...string) *commonv3.RateLimitDescriptor {
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func withHits(d *commonv3.RateLimitDescriptor, n uint64) *commonv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func withLimit(d *commonv3.RateLimitDescriptor, rpu uint32, u typev3.RateLimitUnit) *commonv3.RateLimitDescriptor {
	d.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: u}
	return d
}

func (e *rlsEnv) call(t *testing.T, domain string, hits uint32, ds ...*commonv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := e.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s, %v): %v", domain, ds, err)
	}
	return resp
}

// codes returns the overall code and each status' code, as letters:
// O for OK, X for OVER_LIMIT, such as "X:OX".
func codesOf(r *rlsv3.RateLimitResponse) string {
	c := func(code rlsv3.RateLimitResponse_Code) byte {
		switch code {
		case rlsv3.RateLimitResponse_OK:
			return 'O'
		case rlsv3.RateLimitResponse_OVER_LIMIT:
			return 'X'
		}
		return '?'
	}
	b := []byte{c(r.OverallCode), ':'}
	for _, s := range r.Statuses {
		b = append(b, c(s.Code))
	}
	return string(b)
}

// expect calls n times and checks each answer's codes.
func (e *rlsEnv) expect(t *testing.T, what string, want []string, domain string, ds ...*commonv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	var last *rlsv3.RateLimitResponse
	for i, w := range want {
		last = e.call(t, domain, 0, ds...)
		if got := codesOf(last); got != w {
			t.Fatalf("%s: call %d answered %s, want %s (statuses %v)", what, i+1, got, w, last.Statuses)
		}
	}
	return last
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// remaining asks with hits_addend 0 (no counting) and returns the status.
func (e *rlsEnv) remaining(t *testing.T, domain string, kv ...string) uint32 {
	t.Helper()
	r := e.call(t, domain, 0, withHits(desc(kv...), 0))
	return r.Statuses[0].LimitRemaining
}

type descriptorPB = commonv3.RateLimitDescriptor

const server_MaxDescriptors = server.MaxDescriptors
const server_MaxEntries = server.MaxEntries
