package server_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/memstore"
)

// reqClient is a raw HTTP/2 client of the gRPC listener that sends rate
// limit calls' requests in as many pieces as it likes, within the
// server's flow-control windows (grpc-go closes a connection that sends
// past them), as a client holding unfinished requests does.
type reqClient struct {
	c   net.Conn
	fr  *http2.Framer
	wmu sync.Mutex // the framer's writes

	mu      sync.Mutex
	cond    *sync.Cond
	conn    int64            // the connection's window left
	initial int64            // the server's SETTINGS_INITIAL_WINDOW_SIZE
	windows map[uint32]int64 // the window left to each call not ended
	ended   map[uint32]string
	err     error // what ended the connection
	next    uint32
}

func dialRequests(t *testing.T, env *rlsEnv) *reqClient {
	t.Helper()
	c, fr := rawConn(t, env)
	r := &reqClient{c: c, fr: fr, conn: 65535, initial: 65535, windows: map[uint32]int64{}, ended: map[uint32]string{}, next: 1}
	r.cond = sync.NewCond(&r.mu)
	go r.read()
	return r
}

// read reads the server's frames until the connection ends: its windows,
// and the calls it ends.
func (r *reqClient) read() {
	for {
		f, err := r.fr.ReadFrame()
		ack, pong := false, false
		var ping [8]byte
		r.mu.Lock()
		switch f := f.(type) {
		case nil:
			r.err = err
		case *http2.SettingsFrame:
			if v, ok := f.Value(http2.SettingInitialWindowSize); ok && !f.IsAck() {
				for id := range r.windows {
					r.windows[id] += int64(v) - r.initial
				}
				r.initial = int64(v)
			}
			ack = !f.IsAck()
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				r.conn += int64(f.Increment)
			} else if _, ok := r.windows[f.StreamID]; ok {
				r.windows[f.StreamID] += int64(f.Increment)
			}
		case *http2.PingFrame:
			pong, ping = !f.IsAck(), f.Data
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				r.ended[f.StreamID] = "grpc-status " + statusOf(f)
				delete(r.windows, f.StreamID)
			}
		case *http2.RSTStreamFrame:
			if _, ok := r.ended[f.StreamID]; !ok {
				r.ended[f.StreamID] = "reset " + f.ErrCode.String()
			}
			delete(r.windows, f.StreamID)
		}
		r.cond.Broadcast()
		r.mu.Unlock()
		if err != nil {
			return
		}
		r.wmu.Lock()
		if ack {
			r.fr.WriteSettingsAck()
		}
		if pong {
			r.fr.WritePing(true, ping)
		}
		r.wmu.Unlock()
	}
}

// open starts a rate limit call, its request to come, and returns its
// stream.
func (r *reqClient) open() (uint32, error) { return r.openWith() }

// send sends b on call id as DATA, as fast as the windows let it, the
// last frame with END_STREAM if end; an error is the connection's end,
// or the call's.
func (r *reqClient) send(id uint32, b []byte, end bool) error {
	for first := true; first || len(b) > 0; first = false {
		r.mu.Lock()
		for r.err == nil && r.ended[id] == "" && len(b) > 0 && (r.conn <= 0 || r.windows[id] <= 0) {
			r.cond.Wait()
		}
		if r.err != nil || r.ended[id] != "" {
			err := r.err
			if err == nil {
				err = fmt.Errorf("call %d ended: %s", id, r.ended[id])
			}
			r.mu.Unlock()
			return err
		}
		n := int(min(int64(len(b)), 16<<10, r.conn, r.windows[id]))
		r.conn -= int64(n)
		r.windows[id] -= int64(n)
		r.mu.Unlock()
		r.wmu.Lock()
		err := r.fr.WriteData(id, end && n == len(b), b[:n])
		r.wmu.Unlock()
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// reset resets call id.
func (r *reqClient) reset(id uint32) error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	return r.fr.WriteRSTStream(id, http2.ErrCodeCancel)
}

// wait waits until cond, read under the client's lock, holds, or the
// connection ends (a hang guard of a minute, the connection's deadline):
// it returns what ended it.
func (r *reqClient) wait(cond func() bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for !cond() && r.err == nil {
		r.cond.Wait()
	}
	return r.err
}

// endedAs waits for call id to end and returns how.
func (r *reqClient) endedAs(id uint32) string {
	r.wait(func() bool { return r.ended[id] != "" })
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ended[id]
}

// requestOf is the gRPC body (its 5-byte prefix, then the message) of a
// rate limit request of size bytes (at least 100) in all, decided under
// plainConf.
func requestOf(t *testing.T, size int) []byte {
	t.Helper()
	msg, err := proto.Marshal(&rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*descriptorPB{desc("user", strings.Repeat("v", size-100))}})
	if err != nil {
		t.Fatal(err)
	}
	// Pad the domain's value to the exact size: a domain of 1 byte more
	// each, up to the size asked.
	pad := size - 5 - len(msg)
	msg, err = proto.Marshal(&rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*descriptorPB{desc("user", strings.Repeat("v", size-100+pad))}})
	if err != nil || len(msg) != size-5 {
		t.Fatalf("a request of %d bytes: %d bytes, %v", size-5, len(msg), err)
	}
	return append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg))), msg...)
}

// heldOrClosed waits until env's listener holds n bytes of requests not
// yet whole, or r's connection has ended (which it returns).
func (r *reqClient) heldOrClosed(env *rlsEnv, n int64) error {
	for guard := time.Now().Add(time.Minute); env.grpc.RequestBytes() != n; {
		r.mu.Lock()
		err := r.err
		r.mu.Unlock()
		if err != nil {
			return err
		}
		if time.Now().After(guard) { // a hang guard, not a measure
			return fmt.Errorf("bytes of requests not yet whole: %d, want %d", env.grpc.RequestBytes(), n)
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// waitRequestBytes waits until env's listener holds n bytes of requests
// not yet whole.
func waitRequestBytes(t *testing.T, env *rlsEnv, n int64) {
	t.Helper()
	for guard := time.Now().Add(time.Minute); env.grpc.RequestBytes() != n; {
		if time.Now().After(guard) { // a hang guard, not a measure
			t.Fatalf("bytes of requests not yet whole: %d, want %d", env.grpc.RequestBytes(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestGRPCRequestBytesBounded: a client sending unfinished requests of
// the largest size, 4 MiB each, holds their bytes in the listener (each
// counted as it comes: the listener's figure is the client's count of
// what it sent) until they pass MaxRequestBytesTotal over all
// connections: its connection, the only one, is then closed, counted,
// and the bytes it held are freed. Before, only the calls waiting for
// their request were bounded (DefaultMaxCalls): 1,000 of them held 4 GB,
// as much as the client sent.
func TestGRPCRequestBytesBounded(t *testing.T) {
	env := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{grpc: server.GRPCOptions{KeepaliveTime: time.Hour}})
	r := dialRequests(t, env)
	body := requestOf(t, server.MaxRecvMsgSize+5)
	part := body[:len(body)-1<<10] // all but its last KiB: never whole
	var sent int64                 // what the listener was seen to hold, all the client sent
	for {
		if sent > 4*server.MaxRequestBytesTotal {
			t.Fatalf("%d bytes of unfinished requests held, and the connection open", sent)
		}
		id, err := r.open()
		if err == nil {
			err = r.send(id, part, false)
		}
		if err == nil {
			err = r.heldOrClosed(env, sent+int64(len(part)))
		}
		if err != nil {
			break
		}
		sent += int64(len(part))
	}
	if max := int64(server.MaxRequestBytesTotal); sent > max || sent+int64(len(part)) <= max {
		t.Errorf("closed after %d bytes held; want it closed by the request that passed %d", sent, max)
	}
	if err := r.wait(func() bool { return false }); err == nil {
		t.Fatal("the connection is open")
	}
	waitRequestBytes(t, env, 0)
	if got := env.grpc.ClosedRequestBytes(); got != 1 {
		t.Errorf("ClosedRequestBytes() = %d, want 1", got)
	}
	if peak := env.grpc.RequestBytesPeak(); peak < sent || peak > server.MaxRequestBytesTotal {
		t.Errorf("the most held: %d bytes; want from the %d the client had held whole up to the bound, %d", peak, sent, server.MaxRequestBytesTotal)
	}
	t.Logf("%d unfinished requests (%d bytes) held; the next closed the connection", sent/int64(len(part)), sent)
	// The listener serves on.
	env.call(t, "web", 0, desc("user", "after"))
}

// TestGRPCRequestBytesOldest: past the bound (lowered here to 8 MiB), the
// connection whose unfinished request began first is closed, though
// another holds more, and not the one whose request took the count past
// it; the others' calls carry on, and are decided once their requests are
// whole.
func TestGRPCRequestBytesOldest(t *testing.T) {
	env := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{grpc: server.GRPCOptions{KeepaliveTime: time.Hour, MaxRequestBytes: 8 << 20}})
	clients := make([]*reqClient, 3)
	ids := make([]uint32, 3)
	bodies := make([][]byte, 3)
	held := int64(0)
	for i, size := range []int{2 << 20, 3<<20 + 512<<10, 3 << 20} {
		clients[i] = dialRequests(t, env)
		bodies[i] = requestOf(t, size)
		id, err := clients[i].open()
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
		if i == 2 {
			break
		}
		part := bodies[i][:size-1]
		if err := clients[i].send(id, part, false); err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		held += int64(len(part))
		waitRequestBytes(t, env, held)
	}
	// The third's 2.75 MiB take the count past 8 MiB: the first, begun
	// first, is closed, though the second holds 3.5 MiB to its 2 MiB.
	const third = 11 << 18
	if err := clients[2].send(ids[2], bodies[2][:third], false); err != nil {
		t.Fatalf("the client that took the count past the bound: %v, want it open", err)
	}
	if err := clients[0].wait(func() bool { return false }); err == nil {
		t.Fatal("the client whose request began first is open")
	}
	waitRequestBytes(t, env, int64(len(bodies[1])-1+third))
	if err := clients[1].send(ids[1], bodies[1][len(bodies[1])-1:], true); err != nil {
		t.Fatalf("the second client: %v", err)
	}
	if err := clients[2].send(ids[2], bodies[2][third:], true); err != nil {
		t.Fatalf("the third client: %v", err)
	}
	for i := 1; i < 3; i++ {
		if got := clients[i].endedAs(ids[i]); got != "grpc-status 0" {
			t.Errorf("client %d's call once its request was whole: %s, want grpc-status 0", i, got)
		}
	}
	waitRequestBytes(t, env, 0)
	if got := env.grpc.ClosedRequestBytes(); got != 1 {
		t.Errorf("ClosedRequestBytes() = %d, want 1", got)
	}
}

// TestGRPCRequestBytesReset: a call reset frees the bytes its request
// held, and so does the connection's end: a client may hold, call after
// call, what the bound (lowered here to 3 MiB) holds once.
func TestGRPCRequestBytesReset(t *testing.T) {
	env := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{grpc: server.GRPCOptions{KeepaliveTime: time.Hour, MaxRequestBytes: 3 << 20}})
	r := dialRequests(t, env)
	body := requestOf(t, 5<<19)
	part := body[:2<<20]
	for round := range 3 {
		id, err := r.open()
		if err == nil {
			err = r.send(id, part, false)
		}
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		waitRequestBytes(t, env, int64(len(part)))
		if err := r.reset(id); err != nil {
			t.Fatal(err)
		}
		waitRequestBytes(t, env, 0)
	}
	// A call's request, whole at last, is decided and leaves the count.
	id, err := r.open()
	if err == nil {
		err = r.send(id, part, false)
	}
	if err != nil {
		t.Fatal(err)
	}
	waitRequestBytes(t, env, int64(len(part)))
	if err := r.send(id, body[len(part):], true); err != nil {
		t.Fatal(err)
	}
	if got := r.endedAs(id); got != "grpc-status 0" {
		t.Errorf("the call once its request was whole: %s, want grpc-status 0", got)
	}
	waitRequestBytes(t, env, 0)
	// The connection's end frees what it held.
	if id, err = r.open(); err == nil {
		err = r.send(id, part, false)
	}
	if err != nil {
		t.Fatal(err)
	}
	waitRequestBytes(t, env, int64(len(part)))
	r.c.Close()
	waitRequestBytes(t, env, 0)
	if got := env.grpc.ClosedRequestBytes(); got != 0 {
		t.Errorf("ClosedRequestBytes() = %d, want 0", got)
	}
}

// envoySizedRequest is the largest request Envoy sends with its default
// header bound (TestEnvoySizedRequestDecided's, 3.75 MiB).
func envoySizedRequest() *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: "web"}
	for i := range server_MaxDescriptors {
		req.Descriptors = append(req.Descriptors, desc("user", fmt.Sprintf("%02d", i)+strings.Repeat("v", envoyHeaderBytes-2)))
	}
	return req
}

// TestGRPCRequestBytesEnvoyLoad: Envoy's largest requests, 3.75 MiB,
// several at once on each of two connections, as grpc-go sends them
// (whole, within the server's windows), never come near
// MaxRequestBytesTotal: each counts only while it crosses the
// connection; none is cut.
func TestGRPCRequestBytesEnvoyLoad(t *testing.T) {
	env := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, "domain: web\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n"), envOpts{})
	conn2, err := grpc.NewClient(env.conn.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn2.Close() })
	clients := []rlsv3.RateLimitServiceClient{env.client, rlsv3.NewRateLimitServiceClient(conn2)}
	req := envoySizedRequest()
	size := int64(proto.Size(req)) + 5
	const perConn, calls = 4, 5
	var wg sync.WaitGroup
	errs := make(chan error, len(clients)*perConn*calls)
	for _, c := range clients {
		for range perConn {
			wg.Go(func() {
				for range calls {
					if _, err := c.ShouldRateLimit(context.Background(), req); err != nil {
						errs <- err
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a call: %v", err)
	}
	peak := env.grpc.RequestBytesPeak()
	if got := env.grpc.ClosedRequestBytes(); got != 0 {
		t.Errorf("ClosedRequestBytes() = %d, want 0", got)
	}
	if peak <= 0 || peak > int64(len(clients)*perConn)*size {
		t.Errorf("the most held: %d bytes, want more than none, at most the %d calls at once (%d)", peak, len(clients)*perConn, int64(len(clients)*perConn)*size)
	}
	t.Logf("%d calls of %d bytes, %d at once: at most %d bytes held unfinished (%.1f%% of the bound)",
		len(clients)*perConn*calls, size, len(clients)*perConn, peak, 100*float64(peak)/server.MaxRequestBytesTotal)
}
