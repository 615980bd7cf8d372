package doctest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocErrorCodes: every "error" value the product's docs show in an
// answer's body ({"error":"rate_limited",…}, {"error":"unauthorized: …"})
// is written by the program, so that a client coded against the docs
// matches what it gets: a whole value as a string of the Go sources (tests
// left out), one cut by "…" as the start of one.
func TestDocErrorCodes(t *testing.T) {
	var sources strings.Builder
	err := filepath.WalkDir(Root(), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != Root() || d.Name() == "testdata" || d.Name() == "bench") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		sources.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	code := sources.String()
	reErr := regexp.MustCompile(`"error": ?"([^"…]*)(["…])`)
	var shown int
	for _, page := range productPages(t) {
		text, err := os.ReadFile(filepath.Join(Root(), page))
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range strings.Split(string(text), "\n") {
			for _, m := range reErr.FindAllStringSubmatch(l, -1) {
				v := m[1]
				if v == "" {
					continue // "error":"…": any
				}
				shown++
				if m[2] == `"` { // the whole value
					if !strings.Contains(code, `"`+v+`"`) && !strings.Contains(code, `\"`+v+`\"`) {
						t.Errorf(`%s:%d: shows {"error":"%s"}, which no Go source writes`, page, i+1, v)
					}
					continue
				}
				if !strings.Contains(code, v) {
					t.Errorf(`%s:%d: shows {"error":"%s…}, which no Go source writes`, page, i+1, v)
				}
			}
		}
	}
	if shown < 20 {
		t.Errorf("found %d error values in the docs; the search is broken", shown)
	}
}
