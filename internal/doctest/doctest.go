// Package doctest keeps the samples in README.md and docs/ true: a sample is
// the fenced code block that follows a line "<!-- sample: NAME ... -->",
// and a test computes what the program answers and compares it with the
// block (or, with -update-docs, writes it there).
package doctest

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Update is the -update-docs flag: rewrite the samples instead of
// comparing them.
var Update = flag.Bool("update-docs", false, "rewrite the samples in README.md and docs/ from the program's answers")

// Root returns the repository's root directory (where go.mod is).
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// block locates sample name in text: the lines between the fences, and
// the indentation of the fence.
func block(text, name string) (start, end int, indent string, err error) {
	marker := "<!-- sample: " + name
	i := strings.Index(text, marker)
	if i < 0 {
		return 0, 0, "", fmt.Errorf("no %q marker", marker)
	}
	rest := text[i:]
	nl := strings.IndexByte(rest, '\n')
	if nl < 0 {
		return 0, 0, "", fmt.Errorf("%q: no block after the marker", name)
	}
	pos := i + nl + 1
	// The opening fence: the next line that is indentation and ```.
	line, _, _ := strings.Cut(text[pos:], "\n")
	trimmed := strings.TrimLeft(line, " ")
	if !strings.HasPrefix(trimmed, "```") {
		return 0, 0, "", fmt.Errorf("%q: the line after the marker is %q, not a ``` fence", name, line)
	}
	indent = line[:len(line)-len(trimmed)]
	start = pos + len(line) + 1
	closing := "\n" + indent + "```"
	if strings.HasPrefix(text[start:], indent+"```") {
		return start, start, indent, nil // empty block
	}
	j := strings.Index(text[start-1:], closing)
	if j < 0 {
		return 0, 0, "", fmt.Errorf("%q: no closing fence", name)
	}
	return start, start - 1 + j + 1, indent, nil
}

// Block returns the content of sample name in the file at path (relative
// to the repository's root), without the fence's indentation.
func Block(t testing.TB, path, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(Root(), path))
	if err != nil {
		t.Fatal(err)
	}
	start, end, indent, err := block(string(b), name)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []string
	for _, l := range strings.SplitAfter(string(b)[start:end], "\n") {
		out = append(out, strings.TrimPrefix(l, indent))
	}
	return strings.Join(out, "")
}

// Check compares sample name in the file at path with got (lines ending
// in "\n"), or writes got there with -update-docs.
func Check(t testing.TB, path, name, got string) {
	t.Helper()
	full := filepath.Join(Root(), path)
	b, err := os.ReadFile(full)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start, end, indent, err := block(text, name)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var ind strings.Builder
	for _, l := range strings.SplitAfter(got, "\n") {
		if l == "" {
			continue
		}
		if l != "\n" {
			ind.WriteString(indent)
		}
		ind.WriteString(l)
	}
	want := ind.String()
	if text[start:end] == want {
		return
	}
	if *Update {
		if err := os.WriteFile(full, []byte(text[:start]+want+text[end:]), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: sample %q rewritten", path, name)
		return
	}
	t.Errorf("%s: sample %q is\n%s\nbut the program answers\n%s\n(go test -run %s -update-docs rewrites it)", path, name, text[start:end], want, t.Name())
}
