package server_test

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/memstore"
)

// TestGRPCUnreadIdleWatches: a client that reads every answer, slowly,
// with 101 health Watch calls open (each has had its status), whose
// connection window 100 calls of large answers use up: it reads them
// after a pause longer than the unread timeout (shortened here), and
// keeps its connection. The Watch calls, idle, waited for nothing, but
// were counted as waiting while the connection's window was used up,
// and stayed in the clock's backlog until they ended: the connection
// was closed once the timeout passed.
func TestGRPCUnreadIdleWatches(t *testing.T) {
	const timeout = 50 * time.Millisecond
	env := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{headers: true, grpc: server.GRPCOptions{
		MaxCalls: 10_000, UnreadTimeout: timeout,
	}})
	u := dialUnread(t, env, 1<<20) // the calls' windows never run out
	id := uint32(1)
	open := func(path string, body []byte) {
		t.Helper()
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		for _, f := range callFields {
			if f[0] == ":path" {
				f[1] = path
			}
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		if err := u.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		if err := u.fr.WriteData(id, true, body); err != nil {
			t.Fatal(err)
		}
		id += 2
	}
	const watches = server.MaxUnreadAnswers + 1
	for range watches {
		open("/grpc.health.v1.Health/Watch", make([]byte, 5)) // service ""
	}
	u.bw.Flush()
	// Each Watch's status (SERVING), a message whole.
	var got int
	for statuses := map[uint32]bool{}; len(statuses) < watches; {
		f, err := u.read()
		if err != nil {
			t.Fatalf("%d of %d statuses: %v", len(statuses), watches, err)
		}
		if d, ok := f.(*http2.DataFrame); ok {
			statuses[d.StreamID] = true
			got += len(d.Data())
		}
	}
	msg, err := proto.Marshal(largeRequest())
	if err != nil {
		t.Fatal(err)
	}
	body := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))
	body = append(body, msg...)
	const calls = server.MaxUnreadAnswers
	for range calls {
		open("/"+rlsv3.RateLimitService_ServiceDesc.ServiceName+"/ShouldRateLimit", body)
	}
	u.bw.Flush()
	// The answers use up the connection's window (65,535 bytes, of which
	// the statuses took got).
	ended := 0
	for got < 1<<16-1 {
		f, err := u.read()
		if err != nil {
			t.Fatalf("%d bytes of answers: %v", got, err)
		}
		switch f := f.(type) {
		case *http2.DataFrame:
			got += len(f.Data())
		case *http2.HeadersFrame:
			if f.StreamEnded() {
				ended++
			}
		}
	}
	time.Sleep(2 * timeout) // the client's pace: it reads slowly
	if err := u.fr.WriteWindowUpdate(0, 1<<30); err != nil {
		t.Fatal(err)
	}
	u.bw.Flush()
	for ended < calls {
		f, err := u.read()
		if err != nil {
			t.Fatalf("%d of %d answers ended, then: %v (closed for unread answers %d times)", ended, calls, err, env.grpc.ClosedUnread())
		}
		if h, ok := f.(*http2.HeadersFrame); ok && h.StreamEnded() {
			ended++
		}
	}
	if err := u.alive(); err != nil {
		t.Errorf("after every answer read: %v, want the connection open", err)
	}
	if got := env.grpc.ClosedUnread(); got != 0 {
		t.Errorf("ClosedUnread() = %d, want 0", got)
	}
}
