package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/doctest"
)

// TestDocSimulateSamples: the simulate run that README.md and
// docs/simulate.md show prints what they show.
func TestDocSimulateSamples(t *testing.T) {
	t.Chdir(doctest.Root()) // the pages run it from the repository's root
	const cmd = "$ go run ./cmd/sluice simulate -algorithm token_bucket -rate 5/s -burst 10 \\\n" +
		"    -trace examples/burst.csv -plot examples/burst.svg | head -4\n"
	code, out, errOut := simulateCmd(t, "", "-algorithm", "token_bucket", "-rate", "5/s", "-burst", "10",
		"-trace", "examples/burst.csv", "-plot", filepath.Join(t.TempDir(), "burst.svg"))
	if code != 0 {
		t.Fatalf("simulate: exit %d: %s", code, errOut)
	}
	lines := strings.SplitAfter(out, "\n")
	doctest.Check(t, "README.md", "simulate", cmd+strings.Join(lines[:4], ""))
	doctest.Check(t, "docs/simulate.md", "simulate-summary", errOut)
}

// TestDocSimulateFlags: docs/simulate.md's table of flags is what
// `sluice simulate -h` lists, flag for flag: the same argument name
// (`-store memory|redis`, not `-store string`) and the same default.
func TestDocSimulateFlags(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(doctest.Root(), "docs", "simulate.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `(-[a-z][a-z-]*)(?: ([^`]+))?` \\| ([^|]+) \\|")
	doc := map[string][2]string{} // flag → argument, default column
	for _, m := range row.FindAllStringSubmatch(strings.ReplaceAll(string(b), `\|`, "\x00"), -1) {
		doc[m[1]] = [2]string{strings.ReplaceAll(m[2], "\x00", "|"), strings.TrimSpace(m[3])}
	}
	if len(doc) < 5 {
		t.Fatalf("docs/simulate.md: found %d rows of flags; the table is misread", len(doc))
	}
	code, _, help := simulateCmd(t, "", "-h")
	if code != 0 {
		t.Fatalf("simulate -h: exit %d", code)
	}
	line := regexp.MustCompile(`(?m)^  (-[a-z][a-z-]*)(?: (\S+))?\n\s+(.*)$`)
	seen := map[string]bool{}
	for _, m := range line.FindAllStringSubmatch(help, -1) {
		name, arg, usage := m[1], m[2], m[3]
		seen[name] = true
		d, ok := doc[name]
		if !ok {
			t.Errorf("simulate -h lists %s, docs/simulate.md's table does not", name)
			continue
		}
		if d[0] != arg {
			t.Errorf("%s: docs/simulate.md says `%s %s`, simulate -h says `%s %s`", name, name, d[0], name, arg)
		}
		if _, def, ok := strings.Cut(usage, "(default "); ok {
			def = strings.Trim(strings.TrimSuffix(def, ")"), `"`)
			if !strings.Contains(d[1], "`"+def+"`") {
				t.Errorf("%s: simulate -h says the default is %q, docs/simulate.md says %s", name, def, d[1])
			}
		}
	}
	for name := range doc {
		if !seen[name] {
			t.Errorf("docs/simulate.md's table lists %s, simulate -h does not", name)
		}
	}
}
