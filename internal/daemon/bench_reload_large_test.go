package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/config"
)

// BenchmarkReloadLarge is one reload (SIGHUP's) of a config of 25,000
// rules of mixed keys and algorithms, about 4 MiB: reading, parsing,
// compiling, building the engine and swapping.
func BenchmarkReloadLarge(b *testing.B) {
	var y strings.Builder
	y.WriteString("listen: 127.0.0.1:0\nrules:\n")
	algs := []string{"token_bucket", "gcra", "fixed_window", "sliding_window_counter", "sliding_window_log", "leaky_bucket"}
	keys := []string{"[ip]", "[header:X-Api-Key, method]", "[query:user, path]", "[cookie:session]", "[header:X-Tenant, ip]"}
	for i := range 25000 {
		fmt.Fprintf(&y, "  - name: rule-%05d\n    match: {methods: [GET, POST], path: /v1/r%05d/*}\n    key: %s\n    rate: %d/s\n    algorithm: %s\n",
			i, i, keys[i%len(keys)], 10+i%90, algs[i%len(algs)])
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
	b.SetBytes(int64(y.Len()))
	b.ReportAllocs()
	for b.Loop() {
		if err := d.Reload(); err != nil {
			b.Fatal(err)
		}
	}
}
