package server_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
	"github.com/sluicehq/sluice/memstore"
)

// rawConn opens a raw HTTP/2 connection to env's gRPC listener, past the
// client preface and SETTINGS.
func rawConn(t *testing.T, env *rlsEnv) (net.Conn, *http2.Framer) {
	t.Helper()
	c, err := net.Dial("tcp", env.conn.Target())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(time.Minute)) // a hang guard, not a measure
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return c, fr
}

// callFields are the HEADERS of a rate limit call.
var callFields = [][2]string{
	{":method", "POST"}, {":scheme", "http"}, {":authority", "sluice"},
	{":path", "/" + rlsv3.RateLimitService_ServiceDesc.ServiceName + "/ShouldRateLimit"},
	{"content-type", "application/grpc"}, {"te", "trailers"},
}

// callBlock is callFields encoded with HPACK: the header block of a call
// (the same bytes serve every call of a test).
func callBlock() []byte {
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range callFields {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	return hb.Bytes()
}

// writeBlock writes the header block b of stream id as HEADERS and as
// many CONTINUATION frames as it takes; an error is the server's closing
// the connection.
func writeBlock(fr *http2.Framer, id uint32, b []byte) error {
	n := min(len(b), 16000)
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b[:n], EndHeaders: n == len(b)}); err != nil {
		return err
	}
	for b = b[n:]; len(b) > 0; b = b[n:] {
		n = min(len(b), 16000)
		if err := fr.WriteContinuation(id, n == len(b), b[:n]); err != nil {
			return err
		}
	}
	return nil
}

// pingRoundTrip sends a PING and reads frames until its ACK, acknowledging
// the server's SETTINGS; it returns the streams reset meanwhile, the
// server's SETTINGS, and the read error that ended the connection before
// the ACK, if it ended.
func pingRoundTrip(t *testing.T, fr *http2.Framer) (resets map[uint32]http2.ErrCode, settings map[http2.SettingID]uint32, err error) {
	t.Helper()
	resets, settings = map[uint32]http2.ErrCode{}, map[http2.SettingID]uint32{}
	if err := fr.WritePing(false, [8]byte{'s', 'l', 'u', 'i', 'c', 'e'}); err != nil {
		return resets, settings, err
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return resets, settings, err
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				f.ForeachSetting(func(s http2.Setting) error { settings[s.ID] = s.Val; return nil })
				fr.WriteSettingsAck()
			}
		case *http2.RSTStreamFrame:
			resets[f.StreamID] = f.ErrCode
		case *http2.PingFrame:
			if f.IsAck() {
				return resets, settings, nil
			}
		}
	}
}

// TestGRPCHeaderListBounded: a call's header list is bounded
// (server.MaxHeaderListSize, advertised in SETTINGS): past it the stream
// is reset, and never becomes a call; far past it (the x/net framer's
// bound on the excess it reads) the connection is closed. grpc-go's own
// bound was 16 MB of decoded headers, which HPACK spells in a byte a
// field (an index into its dynamic table): 500 KB sent held 57 MB on the
// server for a call waiting for its request, so that the calls waiting
// (MaxCalls, 1,000) could hold some 57 GB. Calls with 8 KiB of metadata
// (Envoy's carry a few hundred bytes) are served.
func TestGRPCHeaderListBounded(t *testing.T) {
	env := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{})
	for _, c := range []struct {
		name   string
		fields int // of 33 bytes of header list each, a byte sent
		closed bool
	}{
		{"20 KiB", 20 << 10 / 33, false},
		{"16 MB", 500_000, true},
	} {
		_, fr := rawConn(t, env)
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		for _, f := range callFields {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		for range c.fields {
			enc.WriteField(hpack.HeaderField{Name: "x", Value: ""})
		}
		// The server may close the connection before it has all.
		err := writeBlock(fr, 1, hb.Bytes())
		resets, settings := map[uint32]http2.ErrCode{}, map[http2.SettingID]uint32{}
		if err == nil {
			resets, settings, err = pingRoundTrip(t, fr)
		}
		t.Logf("%s of headers (%d bytes sent): resets %v, connection error %v", c.name, hb.Len(), resets, err)
		if got := settings[http2.SettingMaxHeaderListSize]; err == nil && got != server.MaxHeaderListSize {
			t.Errorf("SETTINGS_MAX_HEADER_LIST_SIZE %d, want %d", got, server.MaxHeaderListSize)
		}
		if _, reset := resets[1]; !reset && !(c.closed && err != nil) {
			t.Errorf("a call of %s of headers was neither reset nor its connection closed (%v)", c.name, err)
		}
		if err != nil && !c.closed {
			t.Errorf("a call of %s of headers closed its connection (%v), want only its stream reset", c.name, err)
		}
		if n := env.grpc.Calls(); n != 0 {
			t.Errorf("%d calls waiting for their request after a call of %s of headers, want 0", n, c.name)
		}
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-envoy-custom", strings.Repeat("m", 8<<10))
	if _, err := env.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*commonv3.RateLimitDescriptor{desc("user", "a")}}); err != nil {
		t.Errorf("a call with 8 KiB of metadata: %v", err)
	}
}

// requestBody is the gRPC message of a rate limit request for
// descriptor ("global", "x") in domain web.
func requestBody(t *testing.T) []byte {
	t.Helper()
	msg, err := proto.Marshal(&rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*commonv3.RateLimitDescriptor{desc("global", "x")}})
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 5+len(msg))
	binary.BigEndian.PutUint32(body[1:], uint32(len(msg)))
	copy(body[5:], msg)
	return body
}

// envoyHits is the sum of sluice_envoy_hits_total: the requests decided.
func envoyHits(t *testing.T, env *rlsEnv) float64 {
	t.Helper()
	mfs, err := env.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() == "sluice_envoy_hits_total" {
			for _, m := range mf.Metric {
				n += m.Counter.GetValue()
			}
		}
	}
	return n
}

// TestGRPCRapidReset (CVE-2023-44487): a client opening 10,000 calls
// and resetting each at once, with its request or without, leaves no
// call counted as waiting for its request (the gate reaps them: none is
// refused, no later call is), and other clients are served. grpc-go runs
// at most MaxConcurrentStreams handlers of a connection at once, reset or
// not, and stops reading the connection meanwhile; a reset call ends its
// handler before the decision, or is one decision as any call. The
// connection is kept (unlike the HTTP listeners, which close it): it
// costs the server about what as many requests would.
func TestGRPCRapidReset(t *testing.T) {
	env := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{grpc: server.GRPCOptions{MaxCalls: 100}})
	body := requestBody(t)
	const n = 10_000
	for _, withRequest := range []bool{false, true} {
		c, _ := rawConn(t, env)
		bw := bufio.NewWriter(c)
		fr := http2.NewFramer(bw, c)
		block := callBlock()
		hits := envoyHits(t, env)
		for i := range n {
			id := uint32(2*i + 1)
			if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndHeaders: true}); err != nil {
				t.Fatal(err)
			}
			if withRequest {
				if err := fr.WriteData(id, false, body); err != nil {
					t.Fatal(err)
				}
			}
			if err := fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
				t.Fatal(err)
			}
			if i%64 == 63 {
				if err := bw.Flush(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := bw.Flush(); err != nil {
			t.Fatal(err)
		}
		_, _, err := pingRoundTrip(t, http2.NewFramer(c, c))
		t.Logf("%d calls reset (request sent: %v): %v decided; PING: %v", n, withRequest, envoyHits(t, env)-hits, err)
		if got := env.grpc.CallsRefused(); got != 0 {
			t.Errorf("%d calls refused during the rapid resets; want none, the reset calls reaped", got)
		}
		if got := env.grpc.Calls(); got != 0 {
			t.Errorf("%d calls waiting after the rapid resets, want 0", got)
		}
	}
	if _, err := env.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*commonv3.RateLimitDescriptor{desc("user", "a")}}); err != nil {
		t.Errorf("another client after the rapid resets: %v", err)
	}
}

// TestGRPCClientNotReading: a client that sends requests and reads no
// answer (it grants no flow-control window for them) has at most
// MaxConcurrentStreams of them decided: their answers wait, and their
// calls hold their streams; the rest are refused (REFUSED_STREAM). Once
// it stops sending, keepalive closes its connection (its PING is not
// answered): here within the hang guard, before MaxConnectionAge.
func TestGRPCClientNotReading(t *testing.T) {
	const streams = 20
	env := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{grpc: server.GRPCOptions{
		MaxConcurrentStreams: streams, KeepaliveTime: 50 * time.Millisecond, KeepaliveTimeout: 50 * time.Millisecond,
	}})
	c, err := net.Dial("tcp", env.conn.Target())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute)) // a hang guard, not a measure
	fr := http2.NewFramer(c, c)
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}); err != nil {
		t.Fatal(err)
	}
	block := callBlock()
	body := requestBody(t)
	hits := envoyHits(t, env)
	const n = 10 * streams
	for i := range n {
		id := uint32(2*i + 1)
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		if err := fr.WriteData(id, true, body); err != nil {
			t.Fatal(err)
		}
	}
	// Read (so that the server's writes go through) but answer nothing,
	// no PING, until the server closes the connection.
	refused := 0
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("the connection of a client that answers no PING is still open after a minute")
			}
			break
		}
		if rst, ok := f.(*http2.RSTStreamFrame); ok && rst.ErrCode == http2.ErrCodeRefusedStream {
			refused++
		}
	}
	decided := envoyHits(t, env) - hits
	t.Logf("%d requests sent, not read: %v decided, %d refused", n, decided, refused)
	if decided > streams {
		t.Errorf("%v of %d requests decided with no answer read; want at most MaxConcurrentStreams (%d)", decided, n, streams)
	}
	if refused < n-streams {
		t.Errorf("%d of %d requests refused, want at least %d past MaxConcurrentStreams", refused, n, n-streams)
	}
}

// TestGRPCSlowPreface: a client that connects and sends only part of the
// HTTP/2 preface, or the preface and no SETTINGS, or over TLS only part
// of its ClientHello, is closed at ConnectionTimeout.
func TestGRPCSlowPreface(t *testing.T) {
	ca := tlstest.NewCA(t, "server")
	for _, c := range []struct {
		name string
		tls  *tls.Config
		sent []string
	}{
		{"plaintext", nil, []string{"", http2.ClientPreface[:10], http2.ClientPreface, http2.ClientPreface + "\x00\x00\x00\x04"}},
		// A TLS record header of a ClientHello of 512 bytes, then 5 of them.
		{"TLS", &tls.Config{Certificates: []tls.Certificate{ca.Server(t).TLS}}, []string{"", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03"}},
	} {
		env := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{grpc: server.GRPCOptions{TLS: c.tls, ConnectionTimeout: 50 * time.Millisecond}})
		for _, sent := range c.sent {
			conn, err := net.Dial("tcp", env.conn.Target())
			if err != nil {
				t.Fatal(err)
			}
			conn.SetDeadline(time.Now().Add(time.Minute)) // a hang guard, not a measure
			if _, err := io.WriteString(conn, sent); err != nil {
				t.Fatal(err)
			}
			_, err = io.Copy(io.Discard, conn)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Errorf("%s: a client that sent %q is still connected after a minute", c.name, sent)
			}
			conn.Close()
		}
	}
}
