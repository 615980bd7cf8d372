package descriptors

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A file Load would read twice (listed twice, listed beside its
// directory, or a second name of it in a listed directory) is refused
// naming the name it was read by first: it gave "domain already
// configured in" the file itself (with MergeDomains, "duplicate
// descriptor ... merged from" itself).
func TestLoadFileTwice(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.yaml")
	if err := os.WriteFile(a, []byte("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	linked := t.TempDir()
	if err := os.Symlink(a, filepath.Join(linked, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(a, filepath.Join(linked, "c.yaml")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		paths []string
		want  string
	}{
		{[]string{a, a}, a + ": read twice: grpc.config lists it twice"},
		{[]string{dir, a}, a + ": read twice: grpc.config lists it twice"},
		{[]string{a, filepath.Join(linked, "b.yaml")}, filepath.Join(linked, "b.yaml") + ": the same file as " + a + ", read already"},
		{[]string{linked}, filepath.Join(linked, "c.yaml") + ": the same file as " + filepath.Join(linked, "b.yaml") + ", read already"},
	} {
		for _, merge := range []bool{false, true} {
			_, err := LoadWith(tc.paths, LoadOptions{MergeDomains: merge})
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "already configured") || strings.Contains(err.Error(), "duplicate descriptor") {
				t.Errorf("LoadWith(%q, merge %v) = %v\nwant %q, and no domain or descriptor given twice", tc.paths, merge, err, tc.want)
			}
		}
	}
}
