package main

import (
	"path/filepath"
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
