package daemon

import (
	"bytes"
	"encoding/binary"
	"net"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestGRPCRequestBytesMetrics: the bytes of a gRPC request not yet whole
// are served as sluice_grpc_request_bytes_waiting while they wait, and
// freed when the client goes; the connections closed for their bound are
// served as sluice_grpc_connections_closed_request_bytes_total.
func TestGRPCRequestBytesMetrics(t *testing.T) {
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "ratelimit.yaml"), envoyDescriptors)
	path := filepath.Join(dir, "sluice.yaml")
	mustWrite(t, path, "listen: 127.0.0.1:0\ngrpc: {listen: 127.0.0.1:0, config: [ratelimit.yaml]}\n")
	td := startDaemonFile(t, path)
	c, err := net.Dial("tcp", td.d.Addrs().GRPC)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute)) // a hang guard, not a measure
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "sluice"},
		{":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	c.Write([]byte(http2.ClientPreface))
	fr := http2.NewFramer(c, c)
	fr.WriteSettings()
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
	// A message of 1,000 bytes, 95 of which come.
	if err := fr.WriteData(1, false, append(binary.BigEndian.AppendUint32([]byte{0}, 1000), make([]byte, 95)...)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the request's 100 bytes counted", func() bool { return td.metric("sluice_grpc_request_bytes_waiting") == 100 })
	c.Close()
	waitFor(t, "the bytes freed", func() bool { return td.metric("sluice_grpc_request_bytes_waiting") == 0 })
	mfs, err := td.d.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	served := false
	for _, mf := range mfs {
		served = served || mf.GetName() == "sluice_grpc_connections_closed_request_bytes_total"
	}
	if !served {
		t.Error("sluice_grpc_connections_closed_request_bytes_total is not served")
	}
}
