package server_test

import (
	"encoding/binary"
	"net"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/memstore"
)

// The gRPC listener grants fixed flow-control windows (StreamWindow,
// ConnWindow) and so never sends the PINGs grpc-go's bandwidth estimate
// sends on every round trip of a connection that carries requests: a
// call made over a raw HTTP/2 connection, as Envoy makes it, sees the
// windows in the server's SETTINGS and WINDOW_UPDATE and no PING.
func TestGRPCFixedWindowsNoPing(t *testing.T) {
	set := writeConf(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10}\n")
	env := startRLS(t, memstore.New(memstore.Options{}), set, envOpts{})
	c, err := net.Dial("tcp", env.conn.Target())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
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
	msg, err := proto.Marshal(&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{desc("k", "v")}})
	if err != nil {
		t.Fatal(err)
	}
	body := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))
	body = append(body, msg...)
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteData(1, true, body); err != nil {
		t.Fatal(err)
	}
	var window, connWindow uint32
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("before the call's trailers: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() {
				continue
			}
			window, _ = f.Value(http2.SettingInitialWindowSize)
			if err := fr.WriteSettingsAck(); err != nil {
				t.Fatal(err)
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				connWindow = 65535 + f.Increment
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				t.Fatal("the server sent a PING (a bandwidth estimate)")
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID == 1 && f.StreamEnded() {
				if st := f.Fields; len(st) == 0 || st[0].Name != "grpc-status" || st[0].Value != "0" {
					t.Fatalf("trailers %v, want grpc-status 0 first", st)
				}
				if window != server.StreamWindow || connWindow != server.ConnWindow {
					t.Fatalf("windows: stream %d, connection %d; want %d, %d", window, connWindow, server.StreamWindow, server.ConnWindow)
				}
				return
			}
		}
	}
}
