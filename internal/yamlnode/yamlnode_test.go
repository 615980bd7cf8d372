package yamlnode

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestResolveBudget(t *testing.T) {
	w := NewWalker("d.yaml", "file", 2)
	if n := w.Resolve("a", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "x", Line: 3}); n == nil || w.Spent() {
		t.Fatalf("first value: got %v, spent %v; want the node, not spent", n, w.Spent())
	}
	if n := w.Resolve("b", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "y", Line: 4}); n != nil || !w.Spent() {
		t.Fatalf("second value of a budget of 2: got %v, spent %v; want nil, spent", n, w.Spent())
	}
	w.Resolve("c", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "z", Line: 5})
	if len(w.Errs) != 1 {
		t.Fatalf("Errs = %v, want the one problem", w.Errs)
	}
	if got, want := w.Errs[0].Error(), "d.yaml:4: b: file too large: more than 2 values (aliases expanded)"; got != want {
		t.Fatalf("problem = %q, want %q", got, want)
	}
}

func TestResolveAliasAndNull(t *testing.T) {
	w := NewWalker("c.yaml", "config", 10)
	target := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: "7"}
	if n := w.Resolve("k", &yaml.Node{Kind: yaml.AliasNode, Alias: target}); n != target {
		t.Fatalf("Resolve(alias) = %v, want its target", n)
	}
	if n := w.Resolve("k", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null"}); n != nil {
		t.Fatalf("Resolve(null) = %v, want nil", n)
	}
	if len(w.Errs) != 0 {
		t.Fatalf("Errs = %v, want none", w.Errs)
	}
}

func TestJoinAndSyntaxError(t *testing.T) {
	if got := Join("", "a"); got != "a" {
		t.Fatalf(`Join("", "a") = %q`, got)
	}
	if got := Join("a.b", "c"); got != "a.b.c" {
		t.Fatalf(`Join("a.b", "c") = %q`, got)
	}
	line, msg := SyntaxError(errors.New("yaml: line 12: mapping values are not allowed in this context"))
	if line != 12 || msg != "mapping values are not allowed in this context" {
		t.Fatalf("SyntaxError = %d, %q", line, msg)
	}
	// A parser error counts lines from 0 and names none for the first.
	line, msg = SyntaxError(errors.New("yaml: did not find expected key"))
	if line != 1 || msg != "did not find expected key" {
		t.Fatalf("SyntaxError(parser, no line) = %d, %q", line, msg)
	}
	line, msg = SyntaxError(errors.New("yaml: line 3: did not find expected ',' or ']'"))
	if line != 4 || msg != "did not find expected ',' or ']'" {
		t.Fatalf("SyntaxError(parser, line 3) = %d, %q", line, msg)
	}
	// A scanner error names no line for the first (listen: "127.0.0.1
	// with its quote never closed).
	line, msg = SyntaxError(errors.New("yaml: found unexpected end of stream"))
	if line != 1 || msg != "found unexpected end of stream" {
		t.Fatalf("SyntaxError(scanner, no line) = %d, %q", line, msg)
	}
	// A reader error names none at all: BadCharacter finds it.
	line, msg = SyntaxError(errors.New("yaml: control characters are not allowed"))
	if line != 0 || msg != "control characters are not allowed" {
		t.Fatalf("SyntaxError(reader, no line) = %d, %q", line, msg)
	}
}

func TestMapping(t *testing.T) {
	var doc yaml.Node
	src := "a: 1\nb: 2\na: 3\n<<: {c: 4}\n[x]: 5\nc: 6\n"
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatal(err)
	}
	w := NewWalker("m.yaml", "file", 100)
	var got []string
	ok := w.Mapping("top", doc.Content[0], []string{"a", "b", "c"}, func(name, path string, k, v *yaml.Node) {
		got = append(got, path+"="+v.Value)
	})
	if !ok {
		t.Fatal("Mapping of a mapping returned false")
	}
	if want := []string{"top.a=1", "top.b=2", "top.c=6"}; !slices.Equal(got, want) {
		t.Fatalf("keys walked = %v, want %v (the repeated, merge and non-plain keys skipped)", got, want)
	}
	var msgs []string
	for _, e := range w.Errs {
		msgs = append(msgs, e.Error())
	}
	want := []string{
		"m.yaml:3: top.a: key given twice",
		"m.yaml:4: top: merge keys (<<) are not supported; write the keys out",
		"m.yaml:5: top: a key must be a plain name, not a list",
	}
	if !slices.Equal(msgs, want) {
		t.Fatalf("problems = %q, want %q", msgs, want)
	}

	w = NewWalker("m.yaml", "file", 100)
	if w.Mapping("top", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "s", Line: 2}, []string{"a", "b"}, nil) {
		t.Fatal("Mapping of a string returned true")
	}
	if got, want := w.Errs.Error(), `m.yaml:2: top: want a mapping of keys (a, b), not the string "s"`; got != want {
		t.Fatalf("problem = %q, want %q", got, want)
	}
}

func TestKindName(t *testing.T) {
	for _, c := range []struct {
		n    *yaml.Node
		want string
	}{
		{&yaml.Node{Kind: yaml.MappingNode}, "a mapping"},
		{&yaml.Node{Kind: yaml.SequenceNode}, "a list"},
		{&yaml.Node{Kind: yaml.DocumentNode}, "a YAML document"},
		{&yaml.Node{Kind: yaml.AliasNode}, "an alias"},
		{&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "x"}, `the string "x"`},
		{&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: "3"}, "the number 3"},
		{&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: "0.5"}, "the number 0.5"},
		{&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "true"}, "the boolean true"},
		{&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "~"}, "null"},
		{&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!timestamp", Value: "2026-11-23"}, `the value "2026-11-23"`},
	} {
		if got := KindName(c.n); got != c.want {
			t.Errorf("KindName(%v %s %q) = %q, want %q", c.n.Kind, c.n.Tag, c.n.Value, got, c.want)
		}
	}
}

// TestMappingMerge: with Merge, merge keys apply as YAML 1.1 defines them
// (the reference rate limit service's parser): the mapping's own keys win,
// then the merged mappings in order, each with its own merges after it.
func TestMappingMerge(t *testing.T) {
	var doc yaml.Node
	src := `base: &base {a: 1, b: 1, c: 1}
more: &more {b: 2, d: 2, <<: {e: 3, d: 3}}
top:
  b: 0
  <<: [*more, *base]
bad:
  <<: 7
`
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatal(err)
	}
	root := doc.Content[0]
	w := NewWalker("m.yaml", "file", 100)
	w.Merge = true
	got := map[string]string{}
	w.Mapping("top", root.Content[5], []string{"a", "b", "c", "d", "e"}, func(name, path string, k, v *yaml.Node) {
		if _, dup := got[path]; dup {
			t.Errorf("%s walked twice", path)
		}
		got[path] = v.Value
	})
	want := map[string]string{"top.a": "1", "top.b": "0", "top.c": "1", "top.d": "2", "top.e": "3"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("merged keys = %v, want %v", got, want)
	}
	if len(w.Errs) != 0 {
		t.Errorf("problems = %v, want none", w.Errs)
	}
	w.Mapping("bad", root.Content[7], []string{"a"}, func(string, string, *yaml.Node, *yaml.Node) {})
	if got, want := w.Errs.Error(), "m.yaml:7: bad.<<: a merge key takes a mapping or a list of mappings, not the number 7"; got != want {
		t.Errorf("problem = %q, want %q", got, want)
	}
}

// TestBadCharacter: the first character YAML does not allow is found on
// the line YAML counts (every kind of line break), at its column in
// characters; a clean file, or a UTF-16 one, has none.
func TestBadCharacter(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		line       int
		msg        string // "" for none
	}{
		{"clean", "a: b\n\tc: \u00e9\u2603\U0001F600\n", 0, ""},
		{"latin-1", "a: 1\nb: caf\xe9\n", 2, "byte 0xE9 at column 7 is not UTF-8: save the file as UTF-8"},
		{"cut short", "a: 1\nb: \xe2\x98", 2, "byte 0xE2 at column 4 is not UTF-8: save the file as UTF-8"},
		{"surrogate", "a: \xed\xa0\x80\n", 1, "byte 0xED at column 4 is not UTF-8: save the file as UTF-8"},
		{"NUL", "a: 1\n\x00", 2, "control character U+0000 at column 1 is not allowed"},
		{"DEL", "a: 1\x7f\n", 1, "control character U+007F at column 5 is not allowed"},
		{"after CRLF", "a: 1\r\nb: 2\r\n\x01", 3, "control character U+0001 at column 1 is not allowed"},
		{"after lone CR", "a: 1\rb: 2\r\x01", 3, "control character U+0001 at column 1 is not allowed"},
		{"after NEL and LS", "a: 1\u0085b\u2028\x01", 3, "control character U+0001 at column 1 is not allowed"},
		{"after a BOM", "\uFEFFa: \x02", 1, "control character U+0002 at column 4 is not allowed"},
		{"UTF-16", "\xff\xfea\x00:\x00 \x00\x01\x00", 0, ""},
	} {
		line, msg, ok := BadCharacter([]byte(tc.data))
		if ok != (tc.msg != "") || line != tc.line || msg != tc.msg {
			t.Errorf("%s: BadCharacter(%q) = %d, %q, %v; want %d, %q", tc.name, tc.data, line, msg, ok, tc.line, tc.msg)
		}
	}
}

// TestSyntaxTab: a tab in the indentation is named on its own line, with a
// word on it, whether yaml.v3 reports it there or on the line before.
func TestSyntaxTab(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		line      int
		hint      bool
	}{
		{"tab before a key", "rules:\n  - name: a\n\t  rate: 1/s\n", 3, true},
		{"tab after spaces", "rules:\n  - name: a\n  \trate: 1/s\n", 3, true},
		{"tab after the dash", "rules:\n  -\tname: a\n    rate: 1/s\n", 2, true},
		{"tab in a block", "listen: x\nstore:\n\ttype: memory\n", 3, true},
		{"tab in a block, CRLF", "listen: x\r\nstore:\r\n\ttype: memory\r\n", 3, true},
		// A file saved with the line ends of classic Mac OS: YAML
		// counts its lines as any other's.
		{"tab in a block, CR", "listen: x\rstore:\r\ttype: memory\r", 3, true},
		{"tab before a key, CR", "rules:\r  - name: a\r\t  rate: 1/s\r", 3, true},
		{"no tab", "a: @b\n", 1, false},
	} {
		var doc yaml.Node
		err := yaml.Unmarshal([]byte(tc.src), &doc)
		if err == nil {
			t.Errorf("%s: parsed, want a syntax error", tc.name)
			continue
		}
		line, msg := Syntax([]byte(tc.src), err)
		if line != tc.line || strings.HasSuffix(msg, "YAML indents with spaces") != tc.hint {
			t.Errorf("%s: Syntax = %d, %q; want line %d, the tab named: %v", tc.name, line, msg, tc.line, tc.hint)
		}
	}
}

// TestOwnBudget: the nodes of the document itself are added to the
// budget, which then bounds only what aliases add.
func TestOwnBudget(t *testing.T) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte("a: &x [1, 2, 3]\nb: *x\nc: *x\n"), &doc); err != nil {
		t.Fatal(err)
	}
	root := doc.Content[0]
	walk := func(w *Walker) {
		w.Mapping("", root, []string{"a", "b", "c"}, func(name, path string, k, v *yaml.Node) {
			if l := w.Resolve(path, v); l != nil {
				for _, item := range l.Content {
					w.Resolve(path, item)
				}
			}
		})
	}
	// The file holds 10 nodes (the mapping, 3 keys, the list, its 3
	// items, 2 aliases); the walk visits 13 values: 1 + 3×(1+3).
	w := NewWalker("o.yaml", "file", 4)
	w.Own(root)
	walk(&w)
	if w.Spent() || len(w.Errs) != 0 {
		t.Fatalf("budget 4 + own 10, 13 values visited: spent %v, Errs %v; want neither", w.Spent(), w.Errs)
	}
	w = NewWalker("o.yaml", "file", 1)
	w.Own(root)
	walk(&w)
	if got, want := fmt.Sprint(w.Errs), "o.yaml:1: c: file too large: more than 11 values (aliases expanded)"; !w.Spent() || got != want {
		t.Fatalf("budget 1 + own 10, 13 values visited: spent %v, Errs %s; want %s", w.Spent(), got, want)
	}
}
