package server

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
)

// Defaults of the gRPC listener.
const (
	// DefaultMaxConnectionAge closes a client connection after this long
	// (gracefully, with MaxConnectionAgeGrace for calls in flight), so that
	// clients such as Envoy re-resolve DNS and spread over new instances.
	DefaultMaxConnectionAge      = 5 * time.Minute
	DefaultMaxConnectionAgeGrace = 30 * time.Second
	// DefaultKeepaliveTime pings an idle client to detect dead peers;
	// DefaultKeepaliveTimeout closes it when the ping is not answered.
	DefaultKeepaliveTime    = 30 * time.Second
	DefaultKeepaliveTimeout = 10 * time.Second
	// DefaultSendTimeout is the longest a write to a client connection
	// may go without progress (the client reads nothing of it): the
	// connection is then closed, counted slow. The daemon's listener
	// (internal/listener, send_timeout's semantics: a slow reader that
	// keeps reading is never cut) applies it. Without it, a client that
	// stops reading its socket while it goes on sending calls has the
	// answers the socket does not take wait in grpc-go's queue, before
	// the wire, where the flow-control account (MaxUnreadAnswers) does
	// not see them: measured, 3.7 MB of heap a connection until keepalive
	// ends it, some 40 s on, or with a client that keeps the server
	// reading, until the connection's age. It is grpc-go's own bound on
	// a socket's unacknowledged data, its keepalive timeout, which it
	// sets as TCP_USER_TIMEOUT on the connections it accepts from a bare
	// TCP listener only; the daemon's listener sets it itself
	// (listener.WithUserTimeout).
	DefaultSendTimeout = DefaultKeepaliveTimeout
	// DefaultStopGrace bounds the graceful stop: calls still running then
	// are cut off.
	DefaultStopGrace = 10 * time.Second
	// MaxRecvMsgSize bounds one request message: 4 MiB, as the reference
	// service (grpc-go's default). The values of a request's descriptors
	// are what Envoy copies from the client's request, up to its header
	// bound (max_request_headers_kb, 60 KiB by default) each: a route
	// whose every rate limit (MaxDescriptors) carries one header sends
	// 3.75 MiB. A request refused for its size is let through by Envoy's
	// default failure_mode_deny: false, every descriptor of it uncounted.
	MaxRecvMsgSize = 4 << 20
	// MaxHeaderListSize bounds a call's headers (HTTP/2's header list
	// size: names and values, plus 32 bytes a field), advertised to
	// clients; a call past it is reset. Envoy's calls carry a few hundred
	// bytes. grpc-go's default, 16 MB, is spelled in HPACK with a byte a
	// field: 500 KB sent held 57 MB on the server for a call waiting for
	// its request.
	MaxHeaderListSize = 16 << 10
	// DefaultMaxConcurrentStreams bounds the calls in flight on one client
	// connection; more wait for a free stream (HTTP/2 flow control).
	DefaultMaxConcurrentStreams = 1000
	// DefaultConnectionTimeout bounds a new connection's handshake (TLS
	// and the HTTP/2 preface): a client that connects and sends nothing
	// is closed then, as read_header_timeout does on the HTTP listeners.
	DefaultConnectionTimeout = 10 * time.Second
	// DefaultStreamWorkers is the number of long-lived goroutines that run
	// calls. grpc-go otherwise starts a goroutine per call, whose stack
	// starts small and is grown (copied) several times on the way down
	// to the store: 14% of the CPU of a decision on Redis. Calls beyond
	// the workers in flight still get a goroutine of their own.
	DefaultStreamWorkers = 256
	// StreamWindow and ConnWindow are the HTTP/2 flow-control windows the
	// server grants a client, per call and per connection: fixed, as
	// Envoy's own are, where grpc-go's default sizes them by estimating
	// the bandwidth-delay product, which it does by sending the client a
	// PING (answered by an ack the server reads) on every round trip of
	// a connection that carries requests, without end on a stream of
	// small requests. A call's window holds a request of 1 MiB at once
	// (Envoy's are a few hundred bytes); for a larger one grpc-go widens
	// the window of the call reading it to the whole message; grpc-go's
	// estimate may grow to 16 MB. Measured under gRPC load on Redis
	// (docs/bench-envoy.md): a quarter fewer reads per decision in the
	// daemon.
	StreamWindow = 1 << 20
	ConnWindow   = 4 << 20
)

// windowOptions fix the flow-control windows (StreamWindow, ConnWindow).
func windowOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.InitialWindowSize(StreamWindow), grpc.InitialConnWindowSize(ConnWindow)}
}

// GRPCOptions configures the gRPC listener. The zero value serves
// plaintext with the defaults above.
type GRPCOptions struct {
	// Creds secures the listener (TLS, mTLS); nil serves plaintext. It is
	// the one place transport security plugs in.
	Creds credentials.TransportCredentials
	// TLS, when set and Creds is not, serves TLS with this configuration
	// (grpc.tls: internal/tlsconf builds it, mTLS and client names
	// included), used as it is but for h2 added to its protocols; a
	// client offering no ALPN (Envoy without alpn_protocols) is served.
	TLS *tls.Config
	// MaxConnectionAge, MaxConnectionAgeGrace, KeepaliveTime,
	// KeepaliveTimeout and StopGrace: 0 means the defaults above.
	MaxConnectionAge      time.Duration
	MaxConnectionAgeGrace time.Duration
	KeepaliveTime         time.Duration
	KeepaliveTimeout      time.Duration
	StopGrace             time.Duration
	// MaxConcurrentStreams and ConnectionTimeout: 0 means the defaults
	// above.
	MaxConcurrentStreams uint32
	ConnectionTimeout    time.Duration
	// StreamWorkers: 0 means DefaultStreamWorkers.
	StreamWorkers uint32
	// MaxCalls bounds the calls waiting for their request over all
	// connections (more are refused with RESOURCE_EXHAUSTED); 0 means
	// DefaultMaxCalls.
	MaxCalls int
	// UnreadTimeout: 0 means UnreadTimeout (tests shorten it).
	UnreadTimeout time.Duration
	// MaxUnreadTotal: 0 means MaxUnreadTotal (tests lower it).
	MaxUnreadTotal int
	// MaxRequestBytes: 0 means MaxRequestBytesTotal (tests lower it).
	MaxRequestBytes int64
	// Logger receives the first closing for MaxRequestBytesTotal; nil
	// discards.
	Logger *slog.Logger
}

// GRPC is the gRPC listener of the daemon: the Envoy rate limit service,
// the standard health service and server reflection.
type GRPC struct {
	srv      *grpc.Server
	health   *health.Server
	grace    atomic.Int64 // StopGrace, in nanoseconds (SetStopGrace)
	gate     *callGate
	unread   atomic.Uint64  // connections closed for their unread answers
	requests *requestBudget // MaxRequestBytesTotal
}

// rlsIndirect serves the RLS in force, as returned by get (the daemon
// swaps it on reload).
type rlsIndirect struct {
	rlsv3.UnimplementedRateLimitServiceServer
	get  func() *RLS
	gate *callGate
}

func (r rlsIndirect) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	r.gate.arrived(ctx)
	return r.get().ShouldRateLimit(ctx, req)
}

// NewGRPC returns the gRPC server for the rate limit service returned by
// rls, which is called once per request.
func NewGRPC(rls func() *RLS, o GRPCOptions) *GRPC {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.MaxConnectionAge, DefaultMaxConnectionAge)
	def(&o.MaxConnectionAgeGrace, DefaultMaxConnectionAgeGrace)
	def(&o.KeepaliveTime, DefaultKeepaliveTime)
	def(&o.KeepaliveTimeout, DefaultKeepaliveTimeout)
	def(&o.StopGrace, DefaultStopGrace)
	def(&o.ConnectionTimeout, DefaultConnectionTimeout)
	def(&o.UnreadTimeout, UnreadTimeout)
	if o.MaxUnreadTotal <= 0 {
		o.MaxUnreadTotal = MaxUnreadTotal
	}
	if o.MaxRequestBytes <= 0 {
		o.MaxRequestBytes = MaxRequestBytesTotal
	}
	if o.MaxConcurrentStreams == 0 {
		o.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	if o.StreamWorkers == 0 {
		o.StreamWorkers = DefaultStreamWorkers
	}
	if o.MaxCalls <= 0 {
		o.MaxCalls = DefaultMaxCalls
	}
	gate := newCallGate(o.MaxCalls)
	opts := []grpc.ServerOption{
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionAge:      o.MaxConnectionAge,
			MaxConnectionAgeGrace: o.MaxConnectionAgeGrace,
			Time:                  o.KeepaliveTime,
			Timeout:               o.KeepaliveTimeout,
		}),
		// Envoy pings idle connections too; let it, down to every 10s.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.MaxRecvMsgSize(MaxRecvMsgSize),
		grpc.MaxHeaderListSize(MaxHeaderListSize),
		grpc.MaxConcurrentStreams(o.MaxConcurrentStreams),
		grpc.ConnectionTimeout(o.ConnectionTimeout),
		grpc.NumStreamWorkers(o.StreamWorkers),
		grpc.InTapHandle(gate.tap),
		// Envoy's two messages by hand, others by grpc-go's proto codec.
		grpc.ForceServerCodecV2(newRLSCodec()),
	}
	opts = append(opts, windowOptions()...)
	if o.Creds == nil && o.TLS != nil {
		o.Creds = newServerTLS(o.TLS)
	}
	if o.Creds == nil {
		o.Creds = insecure.NewCredentials()
	}
	g := &GRPC{health: health.NewServer(), gate: gate, requests: newRequestBudget(o.MaxRequestBytes, o.Logger)}
	// Every connection keeps the account of its answers waiting for
	// window (MaxUnreadAnswers, MaxUnreadTotal over all) and of its
	// requests not yet whole (MaxRequestBytesTotal over all).
	opts = append(opts, grpc.Creds(unreadCreds{TransportCredentials: o.Creds, closed: &g.unread, timeout: o.UnreadTimeout,
		budget: newUnreadBudget(o.MaxUnreadTotal), requests: g.requests}))
	g.srv = grpc.NewServer(opts...)
	g.grace.Store(int64(o.StopGrace))
	rlsv3.RegisterRateLimitServiceServer(g.srv, rlsIndirect{get: rls, gate: gate})
	healthpb.RegisterHealthServer(g.srv, g.health)
	reflection.Register(g.srv)
	g.SetServing(true)
	return g
}

// healthNames are the services the health service answers for: the
// server, the rate limit service, and "ratelimit", the name the reference
// service answers for, which its deployments' probes ask.
var healthNames = []string{"", rlsv3.RateLimitService_ServiceDesc.ServiceName, "ratelimit"}

// SetServing sets the health status of the server and the rate limit
// service (the daemon reports NOT_SERVING while the store is unreachable
// under on_error deny, if it chooses to).
func (g *GRPC) SetServing(ok bool) {
	st := healthpb.HealthCheckResponse_SERVING
	if !ok {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	for _, name := range healthNames {
		g.health.SetServingStatus(name, st)
	}
}

// SetStopGrace replaces StopGrace (d > 0): call it before ctx of Serve
// ends, so that the stop lasts what the caller's shutdown allows (the
// daemon's shutdown_timeout, which a reload may change).
func (g *GRPC) SetStopGrace(d time.Duration) {
	if d > 0 {
		g.grace.Store(int64(d))
	}
}

// StopGrace is how long the graceful stop waits for calls in flight.
func (g *GRPC) StopGrace() time.Duration { return time.Duration(g.grace.Load()) }

// Serve serves on lis until ctx ends, then stops gracefully: health turns
// NOT_SERVING, new calls are refused, calls in flight finish (for at most
// StopGrace). It returns nil after a stop caused by ctx.
func (g *GRPC) Serve(ctx context.Context, lis net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- g.srv.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	g.health.Shutdown()
	done := make(chan struct{})
	go func() { g.srv.GracefulStop(); close(done) }()
	t := time.NewTimer(time.Duration(g.grace.Load()))
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		g.srv.Stop()
		<-done
	}
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}
