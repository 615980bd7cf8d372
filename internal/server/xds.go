package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicehq/sluice/internal/descriptors"
)

// XDSTypeURL is the resource type the subscription asks for: the
// reference rate limit service's descriptor config.
const XDSTypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// xdsMaxMessage bounds one response of the xDS server, xdsMaxDetail the
// problems a NACK tells it (the log has them all).
const (
	xdsMaxMessage = 64 << 20
	xdsMaxDetail  = 16 << 10
	xdsKeepalive  = 6 * time.Minute
)

// XDSOptions configure RunXDS.
type XDSOptions struct {
	// Server is the management server's host:port.
	Server string
	// NodeID and NodeMetadata are the node the server keys its
	// snapshots by.
	NodeID       string
	NodeMetadata map[string]string
	// TLS, if set, returns the TLS config of the connection to the
	// server, asked again for each new connection Redial makes; nil
	// dials plaintext.
	TLS func() *tls.Config
	// Redial, if set, has the subscription made again at once over a new
	// connection (with TLS's answer then: the TLS files were read again)
	// each time it receives. The stream in progress is closed: a
	// response being applied is applied, but acknowledged by the new
	// subscription, which sends its version.
	Redial <-chan struct{}
	// Retry bounds the wait before subscribing again when the stream
	// breaks or cannot be opened: each wait is drawn at random between
	// half of it and it. It must be positive.
	Retry time.Duration
	// Apply puts in force the configs of one response: version is the
	// response's, each doc one RateLimitConfig in the descriptor file
	// format, named by XDSDocName. An error refuses them (the configs in
	// force stay): the response is NACKed with the error's text. Apply is
	// called from one goroutine at a time.
	Apply func(version string, docs []descriptors.Doc) error
	// Epoch, if set, changes when something Apply decides by besides the
	// response changes (the daemon's grpc.merge_domains): a refused
	// response sent again is handed to Apply again once it has, not
	// NACKed at once.
	Epoch func() uint64
	// Unread, if set, is told of a response refused before Apply (its
	// resources could not be read as RateLimitConfigs), once as Apply is
	// called once, so that such a refusal is counted as Apply's are.
	Unread func(version string, err error)
	// Logger receives the subscription's logs; nil discards them.
	Logger *slog.Logger
}

// RunXDS subscribes to the RateLimitConfig resources of an xDS management
// server, state of the world over ADS (as the reference service's
// CONFIG_TYPE=GRPC_XDS_SOTW), until ctx is done: each response is handed
// to Apply, then ACKed, or NACKed with Apply's error. When the stream
// breaks it subscribes again after a wait of up to Retry, sending the
// version last applied. It returns nil once ctx is done, or an error for
// options it cannot use.
func RunXDS(ctx context.Context, o XDSOptions) error {
	if o.Retry <= 0 || o.Apply == nil {
		return errors.New("server: xds: Retry and Apply are required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	c := &xdsClient{o: o, node: xdsNode(o)}
	for {
		conn, err := c.dial()
		if err != nil {
			return err
		}
		c.ads = discovery.NewAggregatedDiscoveryServiceClient(conn)
		redial := c.run(ctx)
		conn.Close()
		if !redial || ctx.Err() != nil {
			return nil
		}
		o.Logger.Info("xDS subscription made again over a new connection: the TLS files changed", "server", o.Server)
	}
}

// dial returns a connection to the server, made as the first RPC needs
// it, with TLS's config.
func (c *xdsClient) dial() (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if c.o.TLS != nil {
		if tc := c.o.TLS(); tc != nil {
			creds = credentials.NewTLS(tc)
		}
	}
	conn, err := grpc.NewClient(c.o.Server, grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(xdsMaxMessage)),
		grpc.WithConnectParams(xdsConnectParams(c.o.Retry)),
		// The stream is quiet between versions: a server whose host
		// vanished (no FIN, no RST) would hold it open, unnoticed, and
		// no version would come again. A ping after xdsKeepalive of
		// silence finds it; less often than gRPC servers' default
		// enforcement (5 minutes), which closes the connection of a
		// client that pings more.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: xdsKeepalive, Timeout: 20 * time.Second}))
	if err != nil {
		return nil, fmt.Errorf("server: xds: %s: %w", c.o.Server, err)
	}
	return conn, nil
}

// tooLarge reports whether err is gRPC's refusal of a response over
// xdsMaxMessage. It is refused before it is decoded: its nonce unknown,
// it cannot be NACKed; the stream ends, and the server sends it again to
// the next subscription, refused so until it shrinks.
func tooLarge(err error) bool {
	s, ok := status.FromError(err)
	return ok && s.Code() == codes.ResourceExhausted && strings.Contains(s.Message(), "larger than max")
}

// xdsConnectParams has gRPC make the connection again, while it cannot,
// after waits within [retry/2, retry], as jittered's are, not on gRPC's
// default backoff, which grows to two minutes over a long outage. gRPC
// waits its base delay after the first attempt that fails, unjittered,
// then the base ±xdsBackoffJitter at random: so the base is drawn here,
// for each connection, from the range that keeps all those waits within
// [retry/2, retry]. Instances whose first attempts failed at one instant
// (a fleet started at once while the server is away) then try again
// apart. (After a connection that worked drops, gRPC makes no attempt
// until the subscription made again after run's jittered wait asks for
// one.)
func xdsConnectParams(retry time.Duration) grpc.ConnectParams {
	lo := time.Duration(float64(retry) / 2 / (1 - xdsBackoffJitter))
	hi := time.Duration(float64(retry) / (1 + xdsBackoffJitter))
	base := lo + time.Duration(xdsRand(int64(hi-lo)+1))
	return grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: base, Multiplier: 1, Jitter: xdsBackoffJitter, MaxDelay: base},
		MinConnectTimeout: 20 * time.Second,
	}
}

// xdsBackoffJitter is the jitter of gRPC's waits after its first
// (xdsConnectParams): the bases drawn, from 0.625 to 0.83 of retry, then
// cover [retry/2, retry] between them.
const xdsBackoffJitter = 0.2

// xdsRand returns a random number in [0, n); a test replaces it.
var xdsRand = rand.Int64N

// jittered returns a wait drawn uniformly from [d/2, d]: a fleet of
// instances that lost their server at once do not all come back to it
// at once, and d stays the longest wait.
func jittered(d time.Duration) time.Duration {
	half := d / 2
	return half + time.Duration(xdsRand(int64(d-half)+1))
}

// sleep waits d, or until ctx is done: it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// run subscribes, and subscribes again after a jittered Retry each time
// the stream breaks, until ctx is done (false) or Redial asks for a new
// connection (true).
func (c *xdsClient) run(ctx context.Context) (redial bool) {
	for {
		redial, err := c.stream(ctx)
		if redial {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		// Logged once an outage, not every Retry while it lasts: told
		// again (at Info) once a response comes, or when its cause
		// becomes (or stops being) a response too large.
		big := tooLarge(err)
		log, msg := c.o.Logger.Warn, "xDS subscription broken: the descriptors in force stay; subscribing again within retry"
		if big {
			log, msg = c.o.Logger.Error, "xDS response over the 64 MiB limit: refused unread (gRPC refuses it before it is decoded), so neither applied nor NACKed; the descriptors in force stay; subscribing again within retry"
		}
		if c.failing && c.failedBig == big {
			log = c.o.Logger.Debug
		}
		c.failing, c.failedBig = true, big
		log(msg, "server", c.o.Server, "retry", c.o.Retry, "err", err)
		t := time.NewTimer(jittered(c.o.Retry))
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-c.o.Redial: // new TLS files may end the outage
			t.Stop()
			return true
		case <-t.C:
		}
	}
}

// stream runs one subscription until Redial asks for a new connection
// (redial), ctx is done, or it breaks (err says why).
func (c *xdsClient) stream(ctx context.Context) (redial bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	asked := make(chan bool, 1)
	go func() {
		select {
		case <-c.o.Redial:
			asked <- true
			cancel()
		case <-sctx.Done():
			asked <- false
		}
	}()
	err = c.subscribe(sctx)
	cancel()
	return <-asked, err
}

// xdsClient is one subscription's state across its streams.
type xdsClient struct {
	o       XDSOptions
	ads     discovery.AggregatedDiscoveryServiceClient
	node    *corev3.Node
	version string // of the configs last applied; "" before the first
	// failing: a stream broke, and no response came since (its outage
	// is logged once); failedBig: over a response too large (tooLarge);
	// answered: a response came once.
	failing, failedBig, answered bool
	// refused is the responseDigest of the response last refused, and
	// refusedErr why (nil once a response is applied).
	refused    [sha256.Size]byte
	refusedErr error
	refusedAt  uint64 // Epoch's answer when it was refused
}

// epoch returns Epoch's answer, 0 without one.
func (c *xdsClient) epoch() uint64 {
	if c.o.Epoch == nil {
		return 0
	}
	return c.o.Epoch()
}

// responseDigest is a SHA-256 of a response as sent: its version, type
// and resources (in any order: a server may send them in any), so that
// one refused is known again without being read.
func responseDigest(resp *discovery.DiscoveryResponse) [sha256.Size]byte {
	rs := make([][sha256.Size]byte, len(resp.GetResources()))
	for i, a := range resp.GetResources() {
		h := sha256.New()
		fmt.Fprintf(h, "%d:%s", len(a.GetTypeUrl()), a.GetTypeUrl())
		h.Write(a.GetValue())
		h.Sum(rs[i][:0])
	}
	slices.SortFunc(rs, func(a, b [sha256.Size]byte) int { return bytes.Compare(a[:], b[:]) })
	h := sha256.New()
	fmt.Fprintf(h, "%d:%s%d:%s", len(resp.GetVersionInfo()), resp.GetVersionInfo(), len(resp.GetTypeUrl()), resp.GetTypeUrl())
	for _, r := range rs {
		h.Write(r[:])
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

func xdsNode(o XDSOptions) *corev3.Node {
	n := &corev3.Node{Id: o.NodeID}
	if len(o.NodeMetadata) > 0 {
		fields := make(map[string]*structpb.Value, len(o.NodeMetadata))
		for k, v := range o.NodeMetadata {
			fields[k] = structpb.NewStringValue(v)
		}
		n.Metadata = &structpb.Struct{Fields: fields}
	}
	return n
}

// subscribe opens one stream and serves it until it breaks (or ctx is
// done), returning why.
func (c *xdsClient) subscribe(ctx context.Context) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := c.ads.StreamAggregatedResources(sctx)
	if err != nil {
		return err
	}
	if err := st.Send(&discovery.DiscoveryRequest{VersionInfo: c.version, Node: c.node, TypeUrl: XDSTypeURL}); err != nil {
		return err
	}
	c.o.Logger.Debug("xDS subscription sent", "server", c.o.Server, "node_id", c.node.GetId(), "version", c.version)
	for {
		resp, err := st.Recv()
		if err != nil {
			return err
		}
		if c.failing || !c.answered {
			c.o.Logger.Info("xDS server answers", "server", c.o.Server, "node_id", c.node.GetId(), "version", resp.GetVersionInfo())
			c.failing, c.answered = false, true
		}
		req := &discovery.DiscoveryRequest{Node: c.node, TypeUrl: XDSTypeURL, ResponseNonce: resp.GetNonce()}
		sum := responseDigest(resp)
		at := c.epoch() // before Apply: a change during it is seen next time
		repeat := func() bool { return c.refusedErr != nil && sum == c.refused && at == c.refusedAt }
		if repeat() {
			// The response refused last, sent again: a server that
			// answers every NACK with the snapshot it holds
			// (go-control-plane's snapshot cache does) would otherwise
			// spin with us. The NACK waits a jittered Retry; it is
			// neither read, applied, logged nor counted again, unless
			// Epoch changed meanwhile.
			if !sleep(ctx, jittered(c.o.Retry)) {
				return ctx.Err()
			}
			at = c.epoch()
		}
		if repeat() {
			err = c.refusedErr
		} else {
			var docs []descriptors.Doc
			docs, err = decode(resp)
			if err == nil {
				err = c.o.Apply(resp.GetVersionInfo(), docs)
			} else if c.o.Unread != nil {
				c.o.Unread(resp.GetVersionInfo(), err)
			}
			if err != nil {
				c.o.Logger.Error("xDS config refused (NACK): the descriptors in force stay", "version", resp.GetVersionInfo(), "problem", err.Error())
				c.refused, c.refusedErr, c.refusedAt = sum, err, at
			} else {
				c.refusedErr = nil
				c.version = resp.GetVersionInfo()
			}
		}
		req.VersionInfo = c.version
		if err != nil {
			msg := err.Error()
			if len(msg) > xdsMaxDetail {
				msg = strings.ToValidUTF8(msg[:xdsMaxDetail], "") + " …"
			}
			req.ErrorDetail = &statuspb.Status{Code: int32(codes.InvalidArgument), Message: msg}
		}
		if err := st.Send(req); err != nil {
			return err
		}
	}
}

// decode is decodeResponse (a test counts its calls).
var decode = decodeResponse

// decodeResponse returns the RateLimitConfigs of resp as descriptor
// files, in the order of their names (a server may send them in any
// order: the order decides which of two configs of one domain is named
// the duplicate, and the order merge_domains puts them together in).
func decodeResponse(resp *discovery.DiscoveryResponse) ([]descriptors.Doc, error) {
	if resp.GetTypeUrl() != XDSTypeURL {
		return nil, fmt.Errorf("type %s: not subscribed to (want %s)", resp.GetTypeUrl(), XDSTypeURL)
	}
	type named struct {
		name string
		doc  descriptors.Doc
	}
	all := make([]named, 0, len(resp.GetResources()))
	for i, a := range resp.GetResources() {
		if a.GetTypeUrl() != XDSTypeURL {
			return nil, fmt.Errorf("resources[%d]: type %s, want %s", i, a.GetTypeUrl(), XDSTypeURL)
		}
		var rc rlsconf.RateLimitConfig
		if err := proto.Unmarshal(a.GetValue(), &rc); err != nil {
			return nil, fmt.Errorf("resources[%d]: %w", i, err)
		}
		d, err := xdsDoc(&rc)
		if err != nil {
			return nil, err
		}
		all = append(all, named{rc.GetName(), d})
	}
	slices.SortStableFunc(all, func(a, b named) int { return strings.Compare(a.name, b.name) })
	docs := make([]descriptors.Doc, len(all))
	for i, n := range all {
		docs[i] = n.doc
	}
	return docs, nil
}
