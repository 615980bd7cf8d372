package doctest

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// productPages are the product's docs: README.md, BENCHMARKS.md and the
// older runs it moved to bench/results/HISTORY.md, docs/*.md and the
// examples' READMEs, relative to the root.
func productPages(t *testing.T) []string {
	t.Helper()
	pages := []string{"README.md", "BENCHMARKS.md", "bench/results/HISTORY.md"}
	for _, pattern := range []string{"docs/*.md", "examples/*/README.md", "examples/*/*/README.md"} {
		m, err := filepath.Glob(filepath.Join(Root(), pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m {
			rel, _ := filepath.Rel(Root(), p)
			pages = append(pages, rel)
		}
	}
	return pages
}

var (
	reLink    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	reHeading = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	reInLink  = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	reScheme  = regexp.MustCompile(`^[a-z][a-z0-9+.-]*:`)
)

// proseLines returns the lines of a Markdown page outside fenced code
// blocks, with their 1-based numbers.
func proseLines(text string) map[int]string {
	out := map[int]string{}
	fenced := false
	for i, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimLeft(l, " "), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out[i+1] = l
		}
	}
	return out
}

// anchors returns the anchors GitHub makes of a page's headings: lower
// case, letters, digits, '-' and '_' kept, spaces made '-', everything
// else dropped; a repeated one gets "-1", "-2", ….
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	lines := proseLines(text)
	for n := 1; n <= len(strings.Split(text, "\n")); n++ {
		m := reHeading.FindStringSubmatch(lines[n])
		if m == nil {
			continue
		}
		h := reInLink.ReplaceAllString(m[1], "$1")
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if k, ok := seen[a]; ok {
			seen[a] = k + 1
			a += "-" + strconv.Itoa(k+1)
		} else {
			seen[a] = 0
		}
		out[a] = true
	}
	return out
}

// TestDocLinks: every relative link of the product's docs points at a
// file of the repository, and every #anchor at a heading of its page, so
// that a reader following one lands somewhere (a renamed heading or a
// moved file otherwise leaves the link pointing nowhere).
func TestDocLinks(t *testing.T) {
	pages := productPages(t)
	texts := map[string]string{}
	read := func(rel string) (string, bool) {
		if s, ok := texts[rel]; ok {
			return s, true
		}
		b, err := os.ReadFile(filepath.Join(Root(), rel))
		if err != nil {
			return "", false
		}
		texts[rel] = string(b)
		return string(b), true
	}
	heads := map[string]map[string]bool{} // page → its anchors
	var links int
	for _, page := range pages {
		text, ok := read(page)
		if !ok {
			t.Fatalf("%s: cannot read it", page)
		}
		for n, l := range proseLines(text) {
			for _, m := range reLink.FindAllStringSubmatch(l, -1) {
				target := m[1]
				if reScheme.MatchString(target) {
					continue // http:, https:, mailto:
				}
				links++
				file, frag, _ := strings.Cut(target, "#")
				rel := page
				if file != "" {
					rel = filepath.Clean(filepath.Join(filepath.Dir(page), file))
					if _, err := os.Stat(filepath.Join(Root(), rel)); err != nil {
						t.Errorf("%s:%d: link %q: no such file %s", page, n, target, rel)
						continue
					}
				}
				if frag == "" || !strings.HasSuffix(rel, ".md") {
					continue
				}
				if heads[rel] == nil {
					to, _ := read(rel)
					heads[rel] = anchors(to)
				}
				if !heads[rel][frag] {
					t.Errorf("%s:%d: link %q: %s has no heading with anchor #%s", page, n, target, rel, frag)
				}
			}
		}
	}
	if links < 50 {
		t.Errorf("found %d relative links in %d pages; the extraction is broken", links, len(pages))
	}
}

// TestDocNoInternalDocs: the product's docs never send a reader to the
// project's internal notes (SPEC.md, DESIGN.md), which ship with no
// release and which users cannot read.
func TestDocNoInternalDocs(t *testing.T) {
	re := regexp.MustCompile(`\b(SPEC|DESIGN)\b`)
	for _, page := range productPages(t) {
		b, err := os.ReadFile(filepath.Join(Root(), page))
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range strings.Split(string(b), "\n") {
			if m := re.FindString(l); m != "" {
				t.Errorf("%s:%d: mentions %s: %s", page, i+1, m, strings.TrimSpace(l))
			}
		}
	}
}

// TestDocTestNames: every test, benchmark, fuzz target and example the
// product's docs name (`go test -run TestX`, "BenchmarkY reruns it") is a
// function of some _test.go file, so that a reader's rerun command finds
// it after a rename. A name followed by * is a family and is left out.
func TestDocTestNames(t *testing.T) {
	funcs := map[string]bool{}
	reFunc := regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz|Example)\w*)\(`)
	err := filepath.WalkDir(Root(), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != Root() {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range reFunc.FindAllStringSubmatch(string(b), -1) {
			funcs[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	reName := regexp.MustCompile(`\b((?:Test|Benchmark|Fuzz|Example)[A-Z]\w*)\b(\*?)`)
	var named int
	for _, page := range productPages(t) {
		b, err := os.ReadFile(filepath.Join(Root(), page))
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range strings.Split(string(b), "\n") {
			for _, m := range reName.FindAllStringSubmatch(l, -1) {
				if m[2] == "*" {
					continue
				}
				named++
				if !funcs[m[1]] {
					t.Errorf("%s:%d: names %s, which no _test.go file defines", page, i+1, m[1])
				}
			}
		}
	}
	if named < 20 {
		t.Errorf("found %d test names in the docs; the search is broken", named)
	}
}
