package doctest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// reFigure finds a measured figure in a page: a number with its unit
// (0.90×, 47 %, +3.03 ms, 21.4 µs), the space before the unit optional.
var reFigure = regexp.MustCompile(`[+−]?\d[\d,]*(?:\.\d+)?\s?(?:×|%|ms\b|µs\b)`)

// derivedFigures are the figures of the README's Benchmarks section that
// BENCHMARKS.md does not write as such, each with where it comes from;
// every entry must still be in the section, so that the list cannot go
// stale.
var derivedFigures = map[string]string{
	"+43µs":  "p50 added on one connection: BENCHMARKS.md's sluice proxy 102µs less direct 59µs",
	"+138µs": "the most p50 added on one connection over the runs of bench/results/load-proxy-2026-11-2*.txt",
}

// figure writes a figure as figureProblems compares it: without the
// space before its unit, − as -.
func figure(s string) string {
	s = strings.ReplaceAll(s, "−", "-")
	return strings.Join(strings.Fields(s), "")
}

// figureProblems returns the figures of section that bench does not
// hold, derived ones aside, and the derived figures section lacks.
func figureProblems(section, bench string, derived map[string]string) (problems []string, found int) {
	have := map[string]bool{}
	for _, m := range reFigure.FindAllString(bench, -1) {
		have[figure(m)] = true
	}
	seen := map[string]bool{}
	for _, m := range reFigure.FindAllString(section, -1) {
		f := figure(m)
		found++
		seen[f] = true
		if !have[f] && derived[f] == "" {
			problems = append(problems, m+" is not in BENCHMARKS.md's summary nor in the runs the section shows")
		}
	}
	for f := range derived {
		if !seen[f] {
			problems = append(problems, f+" is listed as derived but no longer cited")
		}
	}
	return problems, found
}

// benchSources are the sections of BENCHMARKS.md the README's Benchmarks
// section cites: the summary, and the two runs it shows in full.
var benchSources = []string{"Summary", "The reverse proxy against nginx", "Gateways: nginx with and without Sluice"}

// mdSection returns the text of the "## heading" section of page, up to
// the next "## " heading.
func mdSection(t *testing.T, page, text, heading string) string {
	t.Helper()
	_, s, ok := strings.Cut(text, "\n## "+heading+"\n")
	if !ok {
		t.Fatalf("%s has no %q section", page, "## "+heading)
	}
	s, _, _ = strings.Cut(s, "\n## ")
	return s
}

// TestDocBenchmarkFigures: every figure of the README's Benchmarks
// section is one BENCHMARKS.md gives in its summary or in the sections of
// the two runs the README shows, so that the README cannot keep a figure
// a newer run replaced there.
func TestDocBenchmarkFigures(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(Root(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	bench, err := os.ReadFile(filepath.Join(Root(), "BENCHMARKS.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := mdSection(t, "README.md", string(readme), "Benchmarks")
	var sources strings.Builder
	for _, h := range benchSources {
		sources.WriteString(mdSection(t, "BENCHMARKS.md", string(bench), h))
	}
	problems, found := figureProblems(section, sources.String(), derivedFigures)
	for _, p := range problems {
		t.Errorf("README.md, Benchmarks: %s", p)
	}
	if found < 20 {
		t.Errorf("found %d figures in the README's Benchmarks section; the extraction is broken", found)
	}
}

// TestDocBenchmarkFiguresCatch: the check refuses a figure BENCHMARKS.md
// does not give and a derived figure no longer cited, and takes a figure
// however its unit is spaced.
func TestDocBenchmarkFiguresCatch(t *testing.T) {
	bench := "| proxy | **0.90×** | 47 % | +3.03 ms | 21.4 vs 17.0 µs |"
	for _, c := range []struct {
		section string
		derived map[string]string
		bad     int
	}{
		{"0.90× and 47% and +3.03ms, 21.4 vs 17.0 µs", nil, 0},
		{"0.91× and 47 %", nil, 1},
		{"+72 µs", map[string]string{"+72µs": "derived"}, 0},
		{"0.90×", map[string]string{"+72µs": "derived"}, 1},
	} {
		if p, _ := figureProblems(c.section, bench, c.derived); len(p) != c.bad {
			t.Errorf("%q: %d problems %v, want %d", c.section, len(p), p, c.bad)
		}
	}
}
