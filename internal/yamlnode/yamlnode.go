// Package yamlnode holds what the strict YAML decoders of the daemon's
// config (internal/config) and of descriptor files (internal/descriptors)
// share: every problem collected with its file, line and key path, aliases
// followed, a bound on the values visited so that an alias bomb stops,
// the checks every mapping gets (plain keys, no merge keys unless
// Walker.Merge, no key given twice) and the words for what was found
// instead of what was wanted. What each decoder accepts stays with it.
package yamlnode

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/rules"
)

// Walker collects the problems of one YAML file. Embed it in a decoder.
type Walker struct {
	File string
	Errs rules.ParseErrors
	// Merge applies merge keys (<<: *anchor, or a list of anchors) as
	// YAML 1.1 defines them, instead of refusing them: for files that
	// another program reads with a YAML 1.1 parser (the descriptor files
	// of Envoy's reference rate limit service).
	Merge bool

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

// Own adds to the budget the nodes of the document at root, aliases not
// followed: those a file holds itself are bounded by its size, so that
// the budget bounds only what its aliases add and a large file without
// aliases is read whole. Call it once, before the walk.
func (w *Walker) Own(root *yaml.Node) {
	n := nodes(root)
	w.max += n
	w.budget += n
}

// nodes counts the nodes of the tree at n, aliases not followed. The
// recursion is as deep as the document, which yaml.v3 bounds (10,000).
func nodes(n *yaml.Node) int {
	if n == nil {
		return 0
	}
	c := 1
	for _, x := range n.Content {
		c += nodes(x)
	}
	return c
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
	if n == nil || !w.spend(key, n) {
		return nil
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	return n
}

// spend charges one value visited at n; false when the budget is spent.
func (w *Walker) spend(key string, n *yaml.Node) bool {
	w.budget--
	if w.budget == 0 {
		w.Fail(n, key, "%s too large: more than %d values (aliases expanded)", w.what, w.max)
	}
	return w.budget > 0
}

// Spent reports whether the value budget ran out.
func (w *Walker) Spent() bool { return w.budget <= 0 }

// Mapping walks the mapping n found at key, calling each for every key in
// order with its name, its key path, the key's node and the value's node.
// It reports, and skips, what no strict decoder accepts: a key that is not
// a plain name, a merge key (<<) and a key given twice. names are the keys
// allowed, quoted when n is not a mapping at all. Mapping returns false
// when n is null, not a mapping, or over the value budget.
func (w *Walker) Mapping(key string, n *yaml.Node, names []string, each func(name, path string, k, v *yaml.Node)) bool {
	if n = w.Resolve(key, n); n == nil {
		return false
	}
	if n.Kind != yaml.MappingNode {
		w.Fail(n, key, "want a mapping of keys (%s), not %s", strings.Join(names, ", "), KindName(n))
		return false
	}
	seen := make(map[string]bool, len(n.Content)/2)
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.AliasNode && k.Alias != nil {
			k = k.Alias
		}
		if k.Kind != yaml.ScalarNode {
			w.Fail(k, key, "a key must be a plain name, not %s", KindName(k))
			continue
		}
		name := k.Value
		path := Join(key, name)
		if name == "<<" && !(w.Merge && k.Tag == "!!merge") {
			w.Fail(k, key, "merge keys (<<) are not supported; write the keys out")
			continue
		}
		if seen[name] {
			w.Fail(k, path, "key given twice")
			continue
		}
		seen[name] = true
		if name == "<<" {
			merges = append(merges, v)
			continue
		}
		each(name, path, k, v)
	}
	// The mapping's own keys win over the merged ones.
	for _, v := range merges {
		w.merge(key, v, seen, each, 0)
	}
	return true
}

// maxMergeDepth bounds merges within merged mappings.
const maxMergeDepth = 32

// merge walks the keys that the merge key's value v (a mapping, or a list
// of mappings: the earlier ones win) adds to the mapping at key, skipping
// those in seen, and each merged mapping's own merges after its keys.
func (w *Walker) merge(key string, v *yaml.Node, seen map[string]bool, each func(name, path string, k, v *yaml.Node), depth int) {
	mk := Join(key, "<<")
	if v = w.Resolve(mk, v); v == nil {
		return
	}
	if depth > maxMergeDepth {
		w.Fail(v, mk, "merge keys nested deeper than %d", maxMergeDepth)
		return
	}
	maps := []*yaml.Node{v}
	if v.Kind == yaml.SequenceNode {
		maps = maps[:0]
		for _, item := range v.Content {
			if m := w.Resolve(mk, item); m != nil {
				maps = append(maps, m)
			}
		}
	}
	for _, m := range maps {
		if m.Kind != yaml.MappingNode {
			w.Fail(m, mk, "a merge key takes a mapping or a list of mappings, not %s", KindName(m))
			continue
		}
		var inner []*yaml.Node
		for i := 0; i+1 < len(m.Content); i += 2 {
			k, val := m.Content[i], m.Content[i+1]
			if !w.spend(mk, k) {
				return
			}
			if k.Kind == yaml.AliasNode && k.Alias != nil {
				k = k.Alias
			}
			if k.Kind != yaml.ScalarNode {
				w.Fail(k, mk, "a key must be a plain name, not %s", KindName(k))
				continue
			}
			switch name := k.Value; {
			case name == "<<" && k.Tag == "!!merge":
				inner = append(inner, val)
			case !seen[name]:
				seen[name] = true
				each(name, Join(key, name), k, val)
			}
		}
		for _, iv := range inner {
			w.merge(key, iv, seen, each, depth+1)
		}
	}
}

// KindName describes n for a problem's "not ..." part: "a list", "the
// number 3", "the string \"x\"".
func KindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.DocumentNode:
		return "a YAML document"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!str":
			return fmt.Sprintf("the string %q", n.Value)
		case "!!int", "!!float":
			return "the number " + n.Value
		case "!!bool":
			return "the boolean " + n.Value
		case "!!null":
			return "null"
		}
		return fmt.Sprintf("the value %q", n.Value)
	}
	return "an alias"
}

// Invisible finds in name, a key, a character that does not show, or
// shows as a space: a format character (a zero-width space, a byte order
// mark), a space other than the ASCII one, a control character. It
// returns the first, and name without them, for a problem to say why a
// key that looks known is not.
func Invisible(name string) (first rune, clean string, ok bool) {
	hidden := func(r rune) bool {
		return r != ' ' && (unicode.IsSpace(r) || unicode.Is(unicode.Cf, r) || !unicode.IsGraphic(r))
	}
	for _, r := range name {
		if hidden(r) {
			return r, strings.Map(func(r rune) rune {
				if hidden(r) {
					return -1
				}
				return r
			}, name), true
		}
	}
	return 0, name, false
}

// Join returns the key path of name below path.
func Join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// WholeNumber matches the text of a whole number, including one too long
// for YAML to resolve as an int (it resolves it as a float): a problem
// then says it is too large, not that it is not a whole number.
var WholeNumber = regexp.MustCompile(`^[-+]?[0-9][0-9_]*$`)

// WellFormedDuration matches what time.ParseDuration reads, when it is
// not too large: each unit after a number, with a digit on at least one
// side of its point ("ms" and ".s" are not durations, whatever their
// size). A duration it matches that does not parse is too large.
var WellFormedDuration = regexp.MustCompile(`^[-+]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$`)

var yamlLine = regexp.MustCompile(`^yaml: (?:line (\d+): )?(.*)$`)

// SyntaxError splits a yaml.v3 error into the line it names (from 1; 0 for
// none) and its message without the "yaml: line N: " prefix. yaml.v3 counts
// its parser's lines from 0 and its scanner's from 1, and names none for a
// problem on the first line: all come back from 1. Its reader's errors (an
// encoding, a control character) name no line: 0.
func SyntaxError(err error) (line int, msg string) {
	msg = err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	switch {
	case parserError(msg):
		// yaml.v3 reports its parser's errors (unlike its scanner's) with
		// the line counted from 0, and no line at all for the first.
		line++
	case line == 0 && !readerError(msg):
		// Its scanner's errors on the first line name none either.
		line = 1
	}
	return line, msg
}

// readerError reports whether msg is one of the errors of yaml.v3's
// reader (readerc.go), which decodes the bytes into characters and names
// no line: see BadCharacter.
func readerError(msg string) bool {
	switch msg {
	case "invalid leading UTF-8 octet", "incomplete UTF-8 octet sequence",
		"invalid trailing UTF-8 octet", "invalid length of a UTF-8 sequence",
		"invalid Unicode character", "incomplete UTF-16 character",
		"unexpected low surrogate area", "incomplete UTF-16 surrogate pair",
		"expected low surrogate area", "control characters are not allowed":
		return true
	}
	return strings.HasPrefix(msg, "input error: ")
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

// Syntax is SyntaxError with data at hand to do better: a reader error
// (an encoding, a control character) gets the line and column of the
// character (BadCharacter), and a tab in the indentation, which yaml.v3
// may report on the line before, the line of the tab and a word on it.
func Syntax(data []byte, err error) (line int, msg string) {
	line, msg = SyntaxError(err)
	if line == 0 {
		if l, m, ok := BadCharacter(data); ok {
			return l, m
		}
		return line, msg
	}
	if msg == "found a tab character that violates indentation" || msg == "found character that cannot start any token" {
		for _, l := range []int{line, line + 1} {
			if tabIndented(lineAt(data, l)) {
				return l, msg + ": a tab indents this line; YAML indents with spaces"
			}
		}
	}
	return line, msg
}

// tabIndented reports whether the indentation of line, sequence dashes
// included, holds a tab.
func tabIndented(line []byte) bool {
	indent := line[:len(line)-len(bytes.TrimLeft(line, " \t-"))]
	return bytes.IndexByte(indent, '\t') >= 0
}

// lineAt returns line n (from 1) of data without its line break, or nil.
// Lines end as YAML ends them: at LF, CRLF, or a CR alone (a file saved
// with classic Mac OS line ends).
func lineAt(data []byte, n int) []byte {
	for i := 1; len(data) > 0; i++ {
		end := bytes.IndexAny(data, "\r\n")
		if end < 0 {
			end = len(data)
		}
		if i == n {
			return data[:end]
		}
		next := end + 1
		if end+1 < len(data) && data[end] == '\r' && data[end+1] == '\n' {
			next++
		}
		data = data[min(next, len(data)):]
	}
	return nil
}

// BadCharacter finds the first character of data that YAML does not
// allow: a byte that is not UTF-8 (a file saved as Latin-1), or a control
// character other than tab and line breaks (a NUL of a file cut short, a
// form feed pasted in). That is where yaml.v3's reader stops, with an
// error that names no line: BadCharacter returns the line (counted as
// YAML counts them) and a message naming the byte or character and its
// column. ok is false when there is none, or when data is UTF-16 (a byte
// order mark first), which the reader decodes itself.
func BadCharacter(data []byte) (line int, msg string, ok bool) {
	if bytes.HasPrefix(data, []byte{0xFF, 0xFE}) || bytes.HasPrefix(data, []byte{0xFE, 0xFF}) {
		return 0, "", false
	}
	data = bytes.TrimPrefix(data, []byte("\uFEFF"))
	line, col := 1, 1
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			return line, fmt.Sprintf("byte 0x%02X at column %d is not UTF-8: save the file as UTF-8", data[i], col), true
		case !yamlPrintable(r):
			return line, fmt.Sprintf("control character %U at column %d is not allowed", r, col), true
		}
		i += size
		switch r {
		case '\r':
			if i < len(data) && data[i] == '\n' {
				i++
			}
			fallthrough
		case '\n', '\u0085', '\u2028', '\u2029':
			line, col = line+1, 1
		default:
			col++
		}
	}
	return 0, "", false
}

// yamlPrintable reports whether YAML allows r in a stream (the YAML 1.1
// c-printable set, as yaml.v3's reader checks it).
func yamlPrintable(r rune) bool {
	return r == '\t' || r == '\n' || r == '\r' || (r >= 0x20 && r <= 0x7E) || r == 0x85 ||
		(r >= 0xA0 && r <= 0xD7FF) || (r >= 0xE000 && r <= 0xFFFD) || (r >= 0x10000 && r <= 0x10FFFF)
}
