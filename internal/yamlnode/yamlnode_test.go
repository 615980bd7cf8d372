package yamlnode

import (
	"errors"
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
	line, msg = SyntaxError(errors.New("yaml: control characters are not allowed"))
	if line != 0 || msg != "control characters are not allowed" {
		t.Fatalf("SyntaxError(scanner, no line) = %d, %q", line, msg)
	}
}
