package doctest

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocLayout: README.md's layout names directories that exist, and
// names every package of the module, so that a package added or moved
// shows up there (the block is marked "layout").
func TestDocLayout(t *testing.T) {
	block := Block(t, "README.md", "layout")
	named := map[string]bool{}
	// A path opens a line, a column (after two spaces) or a list's item;
	// one whose first element is not in the root is a word of a
	// description (net/http).
	reCell := regexp.MustCompile(`,\s*|\s\s+`)
	reDir := regexp.MustCompile(`^[a-z0-9_]+(?:/[a-z0-9_]+)*/?$`)
	for _, l := range strings.Split(block, "\n") {
		for _, cell := range reCell.Split(l, -1) {
			fields := strings.Fields(cell)
			if len(fields) == 0 || !reDir.MatchString(fields[0]) {
				continue
			}
			f := fields[0]
			first, _, _ := strings.Cut(f, "/")
			if _, err := os.Stat(filepath.Join(Root(), first)); err != nil {
				continue
			}
			dir := strings.TrimSuffix(f, "/")
			named[dir] = true
			if st, err := os.Stat(filepath.Join(Root(), dir)); err != nil || !st.IsDir() {
				t.Errorf("README.md layout: names %s, which is no directory of the repository", f)
			}
		}
	}
	var packages int
	err := filepath.WalkDir(Root(), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(Root(), path)
		if d.IsDir() {
			switch {
			case rel == ".":
				return nil
			case strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || rel == "bench" || rel == "examples":
				// bench is a module of its own, named as a whole;
				// examples hold sample programs, not packages.
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		if dir == "." || named["pkg:"+dir] {
			return nil
		}
		named["pkg:"+dir] = true
		packages++
		if !named[dir] {
			t.Errorf("README.md layout: the package %s is not named; add a line for it", dir)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if packages < 20 {
		t.Errorf("found %d packages; the walk is broken", packages)
	}
}

// TestDocMakeTargets: every `make TARGET` the product's docs show is a
// target of the Makefile, so that a reader's command runs.
func TestDocMakeTargets(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(Root(), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-z][a-z0-9_-]*):`).FindAllStringSubmatch(string(b), -1) {
		targets[m[1]] = true
	}
	// In code spans and on the command lines of code blocks.
	reMake := regexp.MustCompile("(?:`|^\\s*(?:[A-Z_]+=\\S+ )*)make ([a-z][a-z0-9_-]*)")
	var shown int
	for _, page := range productPages(t) {
		text, err := os.ReadFile(filepath.Join(Root(), page))
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range strings.Split(string(text), "\n") {
			for _, m := range reMake.FindAllStringSubmatch(l, -1) {
				shown++
				if !targets[m[1]] {
					t.Errorf("%s:%d: shows `make %s`, which the Makefile has no target for", page, i+1, m[1])
				}
			}
		}
	}
	if shown < 10 {
		t.Errorf("found %d make commands in the docs; the search is broken", shown)
	}
}
