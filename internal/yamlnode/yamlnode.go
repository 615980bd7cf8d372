// Package yamlnode holds what the strict YAML decoders of the daemon's
// config (internal/config) and of descriptor files (internal/descriptors)
// share: every problem collected with its file, line and key path, aliases
// followed, and a bound on the values visited so that an alias bomb stops.
// What each decoder accepts, and how it words a wrong type, stays with it.
package yamlnode

import (
	"fmt"
	"regexp"
	"strconv"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/rules"
)

// Walker collects the problems of one YAML file. Embed it in a decoder.
type Walker struct {
	File string
	Errs rules.ParseErrors

	what   string // names the input in the "too large" problem
	max    int
	budget int
}

// NewWalker returns a Walker for file that visits at most max values,
// aliases expanded; what names the input ("config", "file") in the problem
// reported when that budget is spent.
func NewWalker(file, what string, max int) Walker {
	return Walker{File: file, what: what, max: max, budget: max}
}

// Fail records a problem at n's line (0 when n is nil) under key.
func (w *Walker) Fail(n *yaml.Node, key, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	w.Errs = append(w.Errs, &rules.ParseError{File: w.File, Line: line, Key: key, Msg: fmt.Sprintf(format, args...)})
}

// Resolve follows aliases and charges the value budget. It returns nil for
// a null value (so that "key:" with nothing means "not given") and when the
// budget is spent.
func (w *Walker) Resolve(key string, n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n == nil {
		return nil
	}
	w.budget--
	if w.budget == 0 {
		w.Fail(n, key, "%s too large: more than %d values (aliases expanded)", w.what, w.max)
	}
	if w.budget <= 0 {
		return nil
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	return n
}

// Spent reports whether the value budget ran out.
func (w *Walker) Spent() bool { return w.budget <= 0 }

// Join returns the key path of name below path.
func Join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

var yamlLine = regexp.MustCompile(`^yaml: (?:line (\d+): )?(.*)$`)

// SyntaxError splits a yaml.v3 error into the line it names (from 1; 0 for
// none) and its message without the "yaml: line N: " prefix. yaml.v3 counts
// its parser's lines from 0 and its scanner's from 1: both come back from 1.
func SyntaxError(err error) (line int, msg string) {
	msg = err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	if parserError(msg) {
		// yaml.v3 reports its parser's errors (unlike its scanner's) with
		// the line counted from 0, and no line at all for the first.
		line++
	}
	return line, msg
}

// parserError reports whether msg is one of the errors of yaml.v3's
// parser (parserc.go), as opposed to its scanner.
func parserError(msg string) bool {
	switch msg {
	case "did not find expected ',' or ']'", "did not find expected ',' or '}'",
		"did not find expected '-' indicator", "did not find expected <document start>",
		"did not find expected <stream-start>", "did not find expected key",
		"did not find expected node content", "found duplicate %TAG directive",
		"found duplicate %YAML directive", "found incompatible YAML document",
		"found undefined tag handle":
		return true
	}
	return false
}
