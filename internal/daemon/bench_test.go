package daemon

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/config"
)

// BenchmarkCheckLoopback is a whole /v1/check round trip over loopback
// through a running daemon on the memory store (client included: the load
// run in bench/load measures the server alone).
func BenchmarkCheckLoopback(b *testing.B) {
	td := startDaemon(b, `
listen: 127.0.0.1:0
rules:
  - name: bench
    rate: 100000000/s
    algorithm: token_bucket
`)
	url := td.api + "/v1/check"
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := client.Post(url, "application/json", strings.NewReader(`{"rule":"bench","key":"k","cost":1}`))
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("POST /v1/check: %d", resp.StatusCode)
			}
		}
	})
}

// BenchmarkReload is the cost of one reload of a config of 50 rules:
// reading, parsing, compiling and swapping (the apply path of a file
// change or SIGHUP).
func BenchmarkReload(b *testing.B) {
	var y strings.Builder
	y.WriteString("listen: 127.0.0.1:0\nrules:\n")
	for i := range 50 {
		y.WriteString("  - name: r" + string(rune('a'+i%26)) + string(rune('a'+i/26)) + "\n    key: [ip, header:X-Api-Key]\n    match: {path: /api/*}\n    rate: 10/m\n")
	}
	path := filepath.Join(b.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(y.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		b.Fatal(err)
	}
	d, err := New(cfg, Options{ConfigPath: path})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := d.Reload(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
