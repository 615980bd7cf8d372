package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/doctest"
)

// reCmdLine finds a sluice command line in a page: "sluice COMMAND" and
// its arguments, up to the end of the code span or line, or a shell
// operator or comment, where "sluice" starts a code span or a code
// block's line or follows "$ ", "./" or "go run ./cmd/" (`sluice serve -listen
// 127.0.0.1:0`, "$ sluice check-config sluice.yaml", "go run ./cmd/sluice
// simulate -rate 5/s \"); not in prose ("sluice proxy" in a table).
var (
	reCmdLine  = regexp.MustCompile("(?:`|\\$ |\\./|go run \\./cmd/)sluice ([a-z][a-z-]*)((?:[ \\t]+[^\\s`|&;>#\\\\)]+)*)")
	reCmdStart = regexp.MustCompile("^[ \\t]*sluice ([a-z][a-z-]*)((?:[ \\t]+[^\\s`|&;>#\\\\)]+)*)")
)

// reHelpFlag finds a flag in a command's -h output ("  -listen address").
var reHelpFlag = regexp.MustCompile(`(?m)^  (-[a-z][a-z0-9-]*)\b`)

// commandFlags returns, for each command of sluice, the flags its -h
// lists (-h and -help always).
func commandFlags(t *testing.T) map[string]map[string]bool {
	t.Helper()
	out := map[string]map[string]bool{}
	for _, c := range []string{"serve", "check-config", "simulate", "version", "help"} {
		set := map[string]bool{"-h": true, "-help": true}
		if c != "version" && c != "help" {
			var stdout, stderr bytes.Buffer
			if code := run(context.Background(), []string{c, "-h"}, strings.NewReader(""), &stdout, &stderr); code != 0 {
				t.Fatalf("sluice %s -h: exit %d: %s", c, code, stderr.String())
			}
			for _, m := range reHelpFlag.FindAllStringSubmatch(stdout.String()+stderr.String(), -1) {
				set[m[1]] = true
			}
		}
		out[c] = set
	}
	if len(out["serve"]) < 6 || len(out["simulate"]) < 10 {
		t.Fatalf("read %d flags of serve and %d of simulate from their -h; the help is misread", len(out["serve"]), len(out["simulate"]))
	}
	return out
}

// cmdLineProblems checks the sluice command lines of text (page) against
// flags: a command sluice does not have, or a flag its command does not
// take.
func cmdLineProblems(page, text string, flags map[string]map[string]bool) (problems []string, lines int) {
	fenced := false
	for i, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimLeft(l, " "), "```") {
			fenced = !fenced
			continue
		}
		found := reCmdLine.FindAllStringSubmatch(l, -1)
		if m := reCmdStart.FindStringSubmatch(l); fenced && m != nil {
			found = append(found, m)
		}
		for _, m := range found {
			cmd, args := m[1], strings.Fields(m[2])
			lines++
			set, ok := flags[cmd]
			if !ok {
				problems = append(problems, page+":"+strconv.Itoa(i+1)+": `sluice "+cmd+"`: sluice has no command "+cmd)
				continue
			}
			for _, a := range args {
				if len(a) < 2 || a[0] != '-' || a[1] < 'a' || a[1] > 'z' {
					continue // an argument, a placeholder (FILE), "…"
				}
				name, _, _ := strings.Cut(a, "=")
				if !set[name] {
					problems = append(problems, page+":"+strconv.Itoa(i+1)+": `sluice "+cmd+" "+a+"`: "+cmd+" has no flag "+name)
				}
			}
		}
	}
	return problems, lines
}

// TestDocCommandLines: every sluice command line README.md, docs/*.md and
// the examples' READMEs write names a command sluice has and only flags
// that command takes (as its -h lists them), so a reader's command runs
// after a flag is renamed. TestDocSimulateFlags holds docs/simulate.md's
// table of flags to -h as well.
func TestDocCommandLines(t *testing.T) {
	flags := commandFlags(t)
	var pages []string
	for _, pattern := range []string{"README.md", "docs/*.md", "examples/*/README.md", "examples/*/*/README.md"} {
		m, err := filepath.Glob(filepath.Join(doctest.Root(), pattern))
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, m...)
	}
	var total int
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(doctest.Root(), p)
		problems, n := cmdLineProblems(rel, string(b), flags)
		total += n
		for _, pr := range problems {
			t.Error(pr)
		}
	}
	if total < 30 {
		t.Errorf("found %d sluice command lines in %d pages; the search is broken", total, len(pages))
	}
}

// TestDocCommandLinesCatch: the check refuses an unknown command and a
// flag its command does not take, and passes placeholders, values and
// shell around the command.
func TestDocCommandLinesCatch(t *testing.T) {
	flags := commandFlags(t)
	for _, c := range []struct {
		line string
		want int
	}{
		{"`sluice serve -listen 127.0.0.1:0`", 0},
		{"$ sluice serve -config sluice.yaml &   # -bogus in a comment", 0},
		{"go run ./cmd/sluice simulate -algorithm token_bucket -rate 5/s -burst 10 \\", 0},
		{"`sluice check-config FILE`, `sluice help COMMAND`", 0},
		{"`sluice serve -port 8080`", 1},
		{"$ sluice simulate -rate 5/s -store=redis -redis-database 3", 1},
		{"`sluice validate sluice.yaml`", 1},
		{"```sh\nsluice serve -listen :0 -bogus\n```", 1},
		{"a wrapped line of prose:\nsluice proxy 216 µs / 1.83 ms", -1},
	} {
		problems, n := cmdLineProblems("x.md", c.line, flags)
		if c.want < 0 { // prose, not a command line
			if n != 0 || len(problems) != 0 {
				t.Errorf("%q: read as a command line: %q", c.line, problems)
			}
			continue
		}
		if n == 0 {
			t.Errorf("%q: no command line found", c.line)
		}
		if len(problems) != c.want {
			t.Errorf("%q: %d problems, want %d: %q", c.line, len(problems), c.want, problems)
		}
		for _, p := range problems {
			if !strings.HasPrefix(p, "x.md:1: ") && !strings.HasPrefix(p, "x.md:2: ") {
				t.Errorf("%q: %q does not name the page and line", c.line, p)
			}
		}
	}
}
