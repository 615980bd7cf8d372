package doctest

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// reHistory finds the project's own history in a page: its work sessions
// ("the twelfth session", "this session's fixes"), its tracker's issues
// ("issue #12") and the people who did the work ("a helper's slot",
// "other helpers' runs"), none of which a user can look up.
var reHistory = regexp.MustCompile(`(?i)\b(?:(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth|fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth|\d+(?:st|nd|rd|th)|this|next|last|previous|the)\s+session(?:'s|s)?\b|issue\s*#\d+|helper's|helpers')`)

// reExternalLink is a link to another site: "[issue #1060](https://…)"
// names an issue the reader can open.
var reExternalLink = regexp.MustCompile(`\[[^\]]*\]\(https?://[^)]*\)`)

// historyProblems returns "page:line: …" for each mention of the
// project's history in text, link targets left out (a heading's anchor
// elsewhere may still carry an old name) and links to other sites
// allowed.
func historyProblems(page, text string) []string {
	var out []string
	for i, l := range strings.Split(text, "\n") {
		l = reExternalLink.ReplaceAllString(l, "")
		l = reLink.ReplaceAllString(l, "]")
		if m := reHistory.FindString(l); m != "" {
			out = append(out, page+":"+strconv.Itoa(i+1)+": mentions the project's history ("+m+"): "+strings.TrimSpace(l))
		}
	}
	return out
}

// TestDocNoProjectHistory: the product's docs (README.md, BENCHMARKS.md,
// docs/*.md and the examples' READMEs) stand on their own: they name no
// work session, no issue of the project's tracker and none of the people
// who did the work, which a reader cannot look up. A benchmark run is
// dated, and named by its commit.
func TestDocNoProjectHistory(t *testing.T) {
	var checked int
	for _, page := range productPages(t) {
		b, err := os.ReadFile(filepath.Join(Root(), page))
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, p := range historyProblems(page, string(b)) {
			t.Error(p)
		}
	}
	if checked < 10 {
		t.Errorf("checked %d pages; the page list is broken", checked)
	}
}

// TestDocNoProjectHistoryCatch: the check refuses what such a mention
// looks like, and lets through links to other sites' issues and anchors
// into BENCHMARKS.md.
func TestDocNoProjectHistoryCatch(t *testing.T) {
	refused := []string{
		"**Rerun of the nineteenth session: 2026-11-28 15:17 UTC**",
		"after this session's fixes",
		"the target of issue #4 (< 1 ms)",
		"in the proxy helper's quiet measurement slot",
		"other helpers' load runs were going on",
		"The 12th session measured it.",
	}
	for _, l := range refused {
		if p := historyProblems("x.md", l); len(p) != 1 {
			t.Errorf("%q: %d problems, want 1: %q", l, len(p), p)
		} else if !strings.HasPrefix(p[0], "x.md:1: ") {
			t.Errorf("%q: %q does not name the page and line", l, p[0])
		}
	}
	allowed := []string{
		"the reference's [issue #1060](https://github.com/envoyproxy/ratelimit/issues/1060)",
		"([BENCHMARKS.md](BENCHMARKS.md#fleet-sync-and-lease-issue-12))",
		"a session cookie (`cookie:sid`)",
		"TLS session resumption",
		"share one helper returning words",
		"test helpers",
	}
	for _, l := range allowed {
		if p := historyProblems("x.md", l); len(p) != 0 {
			t.Errorf("%q: refused: %q", l, p)
		}
	}
}
