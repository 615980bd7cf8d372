package config

import (
	"path/filepath"
	"slices"
	"testing"
)

// TestNamedFiles: the files a config names are read from it, paths
// resolved against its directory, even when they are missing (Parse
// refuses such a config).
func TestNamedFiles(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "sluice.yaml")
	data := []byte(`listen: 127.0.0.1:0
api:
  token_file: gone/api-token
  tls: {cert: c.pem, key: /abs/k.pem}
proxy:
  listen: 127.0.0.1:0
  upstream: http://127.0.0.1:9
  tls: {cert: p.pem, key: pk.pem, client_ca: ca.pem}
grpc:
  listen: 127.0.0.1:0
  config: [envoy/]
rules:
  - {name: a, rate: 1/s}
`)
	if _, err := Parse(file, data); err == nil {
		t.Fatal("Parse of a config naming missing files: nil error")
	}
	got := NamedFiles(file, data)
	want := []string{filepath.Join(dir, "c.pem"), "/abs/k.pem", filepath.Join(dir, "p.pem"), filepath.Join(dir, "pk.pem"), filepath.Join(dir, "ca.pem"),
		filepath.Join(dir, "envoy"), filepath.Join(dir, "gone/api-token")}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("NamedFiles =\n%q\nwant\n%q", got, want)
	}
	xds := []byte("listen: 127.0.0.1:0\ngrpc:\n  listen: 127.0.0.1:0\n  xds:\n    server: cp:18001\n    tls: {ca: x/ca.pem, cert: x/c.pem, key: /abs/xk.pem}\n")
	got = NamedFiles(file, xds)
	want = []string{filepath.Join(dir, "x/ca.pem"), filepath.Join(dir, "x/c.pem"), "/abs/xk.pem"}
	if !slices.Equal(got, want) {
		t.Errorf("NamedFiles(grpc.xds.tls) =\n%q\nwant\n%q", got, want)
	}
	if got := NamedFiles(file, []byte("listen: 127.0.0.1:0\nrules: [{name: a, rate: 1/s}]\n")); len(got) != 0 {
		t.Errorf("NamedFiles(a config naming none) = %q, want none", got)
	}
	if got := NamedFiles(file, []byte("listen: [\n")); got != nil {
		t.Errorf("NamedFiles(not YAML) = %q, want nil", got)
	}
}
