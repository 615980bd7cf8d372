package server_test

import (
	"context"
	"encoding/binary"
	"net"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/memstore"
)

// stalledCalls opens a raw HTTP/2 connection to env's gRPC listener and
// starts n rate limit calls whose request never comes (HEADERS, no DATA):
// each held a goroutine and ~10 KB on the server, so 1,000 streams on
// each of max_connections connections once held 10 KB × 1,000 × 10,000.
// It returns the framer, to read the server's answers.
func stalledCalls(t *testing.T, env *rlsEnv, n int) *http2.Framer {
	t.Helper()
	c, err := net.Dial("tcp", env.conn.Target())
	if err != nil {
		t.Fatal(err)
	}
	return stalledCallsOn(t, c, n)
}

// stalledCallsOn is stalledCalls on the connection c.
func stalledCallsOn(t *testing.T, c net.Conn, n int) *http2.Framer {
	t.Helper()
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
	block := callBlock()
	for i := range n {
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: block, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
	}
	return fr
}

// statuses reads frames until want streams have ended, acknowledging the
// server's SETTINGS, and returns the grpc-status of each stream ended.
func statuses(t *testing.T, fr *http2.Framer, want int) map[uint32]string {
	t.Helper()
	got := map[uint32]string{}
	for len(got) < want {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("after %d of %d streams ended: %v", len(got), want, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				got[f.StreamID] = f.PseudoValue("status") + " grpc-status " + statusOf(f)
			}
		case *http2.RSTStreamFrame:
			if _, ended := got[f.StreamID]; !ended { // a reset after the trailers only closes our side
				got[f.StreamID] = "reset " + f.ErrCode.String()
			}
		}
	}
	return got
}

func statusOf(f *http2.MetaHeadersFrame) string {
	for _, hf := range f.Fields {
		if hf.Name == "grpc-status" {
			return hf.Value
		}
	}
	return ""
}

// TestGRPCCallsBounded: the calls waiting for their request on the gRPC
// listener, over all its connections, are bounded (GRPCOptions.MaxCalls):
// past it a call is refused at once with RESOURCE_EXHAUSTED.
func TestGRPCCallsBounded(t *testing.T) {
	set := writeConf(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10}\n")
	env := startRLS(t, memstore.New(memstore.Options{}), set, envOpts{grpc: server.GRPCOptions{MaxCalls: 20}})
	fr := stalledCalls(t, env, 50)
	refused := 0
	for id, st := range statuses(t, fr, 30) {
		if st != "200 grpc-status 8" {
			t.Errorf("stream %d: %s, want refused with grpc-status 8 (RESOURCE_EXHAUSTED)", id, st)
		}
		refused++
	}
	if refused != 30 {
		t.Fatalf("%d of 50 stalled calls refused, want 30 past MaxCalls 20", refused)
	}
	// The 20 held fill the bound: another connection's call is refused too.
	_, err := env.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{desc("k", "v")}})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a call while 20 are held: %v, want RESOURCE_EXHAUSTED", err)
	}
}

// waitCalls waits until env's gRPC listener holds n calls.
func waitCalls(t *testing.T, env *rlsEnv, n int) {
	t.Helper()
	for guard := time.Now().Add(time.Minute); env.grpc.Calls() != n; {
		if time.Now().After(guard) { // a hang guard, not a measure
			t.Fatalf("calls in flight: %d, want %d", env.grpc.Calls(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestGRPCCallsFreed: a call leaves the count once its request has come,
// and the calls held are counted down however they end (their connection
// gone), so calls are served again.
func TestGRPCCallsFreed(t *testing.T) {
	set := writeConf(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1000}\n")
	env := startRLS(t, memstore.New(memstore.Options{}), set, envOpts{grpc: server.GRPCOptions{MaxCalls: 20}})
	c, err := net.Dial("tcp", env.conn.Target())
	if err != nil {
		t.Fatal(err)
	}
	stalledCallsOn(t, c, 20)
	waitCalls(t, env, 20)
	if _, err := env.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{desc("k", "v")}}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a call while 20 are held: %v, want RESOURCE_EXHAUSTED", err)
	}
	c.Close()
	waitCalls(t, env, 0)
	for range 30 { // more than MaxCalls: answered calls leave the count
		env.call(t, "d", 0, desc("k", "v"))
	}
	if n := env.grpc.Calls(); n != 0 {
		t.Errorf("after 30 answered calls, %d counted as waiting; want 0", n)
	}
	resp, err := env.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{desc("k", "v")}})
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("a call once the stalled connection closed: %v, %v; want OK", resp, err)
	}
	if got := env.grpc.CallsRefused(); got != 1 {
		t.Errorf("CallsRefused = %d, want 1", got)
	}
}

// TestGRPCUnfinishedRequestWaits: a call whose request came in part (its
// DATA holds up to the whole message, at most MaxRecvMsgSize, in the
// server's memory) still counts as waiting, so MaxCalls bounds that
// memory too; once the rest comes the call is answered and leaves the
// count.
func TestGRPCUnfinishedRequestWaits(t *testing.T) {
	set := writeConf(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10}\n")
	env := startRLS(t, memstore.New(memstore.Options{}), set, envOpts{})
	fr := stalledCalls(t, env, 1)
	msg, err := proto.Marshal(&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{desc("k", "v")}})
	if err != nil {
		t.Fatal(err)
	}
	body := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))
	body = append(body, msg...)
	half := len(body) / 2
	if err := fr.WriteData(1, false, body[:half]); err != nil {
		t.Fatal(err)
	}
	waitCalls(t, env, 1)
	if err := fr.WriteData(1, true, body[half:]); err != nil {
		t.Fatal(err)
	}
	for id, st := range statuses(t, fr, 1) {
		if !strings.HasSuffix(st, "grpc-status 0") { // the trailers, after the answer's headers
			t.Errorf("stream %d once its request came whole: %s, want grpc-status 0", id, st)
		}
	}
	waitCalls(t, env, 0)
}
