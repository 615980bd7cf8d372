package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sluicehq/sluice/internal/redistest"
)

// bytesCodec sends a message as the bytes given: what Envoy sends for a
// header that is not UTF-8, which Go's protobuf refuses to write.
type bytesCodec struct{}

func (bytesCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (bytesCodec) Unmarshal(b []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), b...)
	return nil
}
func (bytesCodec) Name() string { return "proto" }

// An Envoy descriptor of shards: auto whose value is not UTF-8 (Envoy
// passes a header's bytes on as they are) is decided over gRPC, and feeds
// its summary as any key: GET /v1/hotkeys shows it as docs/hotkeys.md
// says (U+FFFD for each byte not UTF-8, "…", the digest of the key's
// bytes) in valid JSON, two keys a byte apart apart, and /metrics
// answers.
func TestEnvoyHotKeyNotUTF8(t *testing.T) {
	srv := redistest.StartServer(t)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "ratelimit"), 0o755); err != nil {
		t.Fatal(err)
	}
	desc := "domain: hot\ndescriptors:\n  - key: user\n    shards: auto\n    rate_limit: {unit: second, requests_per_unit: 1000000}\n"
	if err := os.WriteFile(filepath.Join(dir, "ratelimit", "hot.yaml"), []byte(desc), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sluice.yaml")
	yaml := "listen: 127.0.0.1:0\ngrpc:\n  listen: 127.0.0.1:0\n  config: [ratelimit]\nstore:\n  type: redis\n  redis: {addrs: [" + srv.Addr + "]}\n"
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	td := startDaemonFile(t, path)
	conn, err := grpc.NewClient(td.d.Addrs().GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	call := func(value string) {
		entry := protowire.AppendTag(nil, 1, protowire.BytesType)
		entry = protowire.AppendString(entry, "user")
		entry = protowire.AppendTag(entry, 2, protowire.BytesType)
		entry = protowire.AppendString(entry, value)
		d := protowire.AppendTag(nil, 1, protowire.BytesType)
		d = protowire.AppendBytes(d, entry)
		req := protowire.AppendTag(nil, 1, protowire.BytesType)
		req = protowire.AppendString(req, "hot")
		req = protowire.AppendTag(req, 2, protowire.BytesType)
		req = protowire.AppendBytes(req, d)
		var out []byte
		if err := conn.Invoke(context.Background(), "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", &req, &out, grpc.ForceCodec(bytesCodec{})); err != nil {
			t.Fatalf("ShouldRateLimit(user=%q): %v", value, err)
		}
	}
	// The summary records one decision in 4, at random: of 100, none is
	// recorded with odds of (3/4)^100 ≈ 3e-13.
	for range 100 {
		call("caf\xe9")
		call("caf\xe8")
	}
	got := get(t, td.api+"/v1/hotkeys?rule=envoy/hot/user")
	var body struct {
		Rules []struct {
			Rule string `json:"rule"`
			Keys []struct {
				Key string `json:"key"`
			} `json:"keys"`
		} `json:"rules"`
	}
	if err := json.Unmarshal([]byte(got.body), &body); err != nil || got.status != http.StatusOK || len(body.Rules) != 1 {
		t.Fatalf("GET /v1/hotkeys: %d %q: %v", got.status, got.body, err)
	}
	keys := map[string]bool{}
	for _, k := range body.Rules[0].Keys {
		keys[k.Key] = true
	}
	for _, v := range []string{"caf\xe9", "caf\xe8"} {
		key := "4:user" + fmt.Sprint(len(v)) + ":" + v // the store key after the descriptor's head
		h := fnv.New64a()
		h.Write([]byte(key))
		if want := fmt.Sprintf("4:user4:caf\ufffd…%016x", h.Sum64()); !keys[want] {
			t.Errorf("GET /v1/hotkeys: keys %v, want %q among them", keys, want)
		}
	}
	if m := get(t, td.api+"/metrics"); m.status != http.StatusOK || !strings.Contains(m.body, `sluice_hot_key_rate{key="4:user4:caf`+"\ufffd…") {
		t.Errorf("GET /metrics: %d, want 200 with the key's series; body %.300q", m.status, m.body)
	}
}
