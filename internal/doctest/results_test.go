package doctest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// reResultFile is a benchmark run's output named in a page, as figures
// cite it: `bench/results/fleet-2026-11-28g.txt`, or results/… from bench/.
var reResultFile = regexp.MustCompile("`((?:bench/)?results/[A-Za-z0-9._-]+\\.txt)`")

// TestDocResultFiles: every run output a page names as where its figures
// come from is in the repository, so a reader can check a figure against
// the run's full output (a file renamed or never committed otherwise
// leaves the figure unsourced).
func TestDocResultFiles(t *testing.T) {
	var named int
	for _, page := range productPages(t) {
		b, err := os.ReadFile(filepath.Join(Root(), page))
		if err != nil {
			t.Fatal(err)
		}
		for n, l := range proseLines(string(b)) {
			for _, m := range reResultFile.FindAllStringSubmatch(l, -1) {
				named++
				rel := m[1]
				if !strings.HasPrefix(rel, "bench/") {
					rel = filepath.Join("bench", rel)
				}
				if _, err := os.Stat(filepath.Join(Root(), rel)); err != nil {
					t.Errorf("%s:%d: names %s, which is not in the repository", page, n, m[1])
				}
			}
		}
	}
	if named < 20 {
		t.Errorf("found %d run outputs named; the extraction is broken", named)
	}
}
