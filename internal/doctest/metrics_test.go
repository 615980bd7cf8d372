package doctest

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// reMetric finds a metric name of Sluice's (sluice_...) in text; in Go
// source, only inside a string literal.
var (
	reMetric   = regexp.MustCompile(`\bsluice_[a-z0-9_]*[a-z0-9]\b`)
	reGoMetric = regexp.MustCompile(`"(sluice_[a-z0-9_]*[a-z0-9])"`)
)

// notMetrics are sluice_ words of the docs that name no metric.
var notMetrics = map[string]string{
	"sluice_unavailable": "an nginx named location, @sluice_unavailable",
}

// TestDocMetricNames: every sluice_ metric README.md and docs/*.md name is
// one the code registers (a renamed series is a dashboard that stays
// empty), and every one the code registers is named in them.
func TestDocMetricNames(t *testing.T) {
	code := map[string]bool{}
	err := filepath.WalkDir(Root(), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "bench" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != Root() {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range reGoMetric.FindAllStringSubmatch(string(b), -1) {
			code[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(code) < 40 {
		t.Fatalf("found %d metric names in the code; the search is broken", len(code))
	}
	pages, err := filepath.Glob(filepath.Join(Root(), "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, filepath.Join(Root(), "README.md"))
	documented := map[string]string{} // name → a page naming it
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(Root(), p)
		for _, name := range reMetric.FindAllString(string(b), -1) {
			documented[name] = rel
		}
	}
	var unknown, undocumented []string
	for name, page := range documented {
		if !code[name] && notMetrics[name] == "" {
			unknown = append(unknown, name+" ("+page+")")
		}
	}
	for name := range code {
		// The README abbreviates a family after its first member:
		// sluice_fleet_sync_batches_total, …_batch_keys_total.
		if _, ok := documented[name]; !ok && !abbreviated(name, documented) {
			undocumented = append(undocumented, name)
		}
	}
	sort.Strings(unknown)
	sort.Strings(undocumented)
	if len(unknown) > 0 {
		t.Errorf("metric names in the docs that the code does not register:\n%s", strings.Join(unknown, "\n"))
	}
	if len(undocumented) > 0 {
		t.Errorf("metrics the code registers that README.md and docs/*.md never name:\n%s", strings.Join(undocumented, "\n"))
	}
}

// abbreviated reports whether the docs name name as "…_SUFFIX" after a
// documented sibling: the same family prefix (the name up to its third
// underscore, sluice_fleet_sync) documented, and the rest of name written
// after "…_" on some page.
func abbreviated(name string, documented map[string]string) bool {
	parts := strings.SplitN(name, "_", 4)
	if len(parts) < 4 {
		return false
	}
	family := strings.Join(parts[:3], "_") + "_"
	for d := range documented {
		if strings.HasPrefix(d, family) {
			return ellipsis(parts[3])
		}
	}
	return false
}

// ellipsis reports whether some page writes "…_rest" (rest, or a longer
// suffix of the name ending in it).
func ellipsis(rest string) bool {
	for _, p := range append(mustGlob(filepath.Join(Root(), "docs", "*.md")), filepath.Join(Root(), "README.md")) {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), "…_"+rest) {
			return true
		}
	}
	return false
}

func mustGlob(pattern string) []string {
	m, _ := filepath.Glob(pattern)
	return m
}
