package server_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	refpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/memstore"
)

// TestGRPCUnreadReflection: a client that asks server reflection for the
// rate limit service on MaxUnreadAnswers calls of each of its connections
// and reads none of the answers (25 files, 44 KB) holds about an answer's
// size a call: the answers are marshalled into buffers of their own
// size. They went to grpc-go's buffer pool, whose sizes jump from 32 KB
// to 1 MB: each waiting answer held 1 MB (measured, 1,030 KB a call), so
// 100 MB a connection, which its 100 answers never get closed for, and
// 1 GB for the listener's (reflection calls count toward MaxCalls while
// they last, and now take at most half of it: 500 MB, now 27 MB).
func TestGRPCUnreadReflection(t *testing.T) {
	env := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{grpc: server.GRPCOptions{MaxCalls: 10_000}})
	msg, err := proto.Marshal(&refpb.ServerReflectionRequest{MessageRequest: &refpb.ServerReflectionRequest_FileContainingSymbol{
		FileContainingSymbol: rlsv3.RateLimitService_ServiceDesc.ServiceName,
	}})
	if err != nil {
		t.Fatal(err)
	}
	body := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))
	body = append(body, msg...)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range callFields {
		if f[0] == ":path" {
			f[1] = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
		}
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	const conns, calls = 2, server.MaxUnreadAnswers
	h0, _ := heap()
	for range conns {
		u := dialUnread(t, env, 8)
		for i := range calls {
			id := uint32(2*i + 1)
			if err := u.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
				t.Fatal(err)
			}
			if err := u.fr.WriteData(id, false, body); err != nil {
				t.Fatal(err)
			}
		}
		u.bw.Flush()
		// Each answer's first 8 bytes: its length.
		size := map[uint32]uint32{}
		for len(size) < calls {
			f, err := u.read()
			if err != nil {
				t.Fatalf("%d of %d answers begun: %v", len(size), calls, err)
			}
			if d, ok := f.(*http2.DataFrame); ok && len(d.Data()) >= 5 {
				size[d.StreamID] = binary.BigEndian.Uint32(d.Data()[1:])
			}
		}
		if size[1] < 32<<10 {
			t.Fatalf("a reflection answer of %d bytes, want one past grpc-go's 32 KB buffers", size[1])
		}
	}
	h1, _ := heap()
	per := (h1 - h0) / (conns * calls)
	t.Logf("%d connections with %d reflection answers waiting each: %d KB of heap an answer", conns, calls, per>>10)
	if per > 256<<10 {
		t.Errorf("%d KB of heap a reflection answer waiting for window, want about its size (44 KB)", per>>10)
	}
}
