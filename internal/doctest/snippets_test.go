package doctest

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestDocGoSnippets: every ```go block of README.md and docs/*.md compiles
// against the current code, so that a renamed function, a changed
// signature or a field that moved cannot leave a reader's copy broken.
// The rules (snippetCheck applies them), simple on purpose:
//
//   - A block that starts with a package clause is a whole file, checked
//     as it stands.
//   - Any other block is a fragment: statements, led by import
//     declarations if it likes. Its statements become the body of
//     func _() (_ any), so that return, return err and return h all fit,
//     in a package that also declares the givens: the variables the docs
//     leave to the reader (ctx, r, w, lim, yourHandler, …: snippetGivens).
//     A fragment may declare one again (lim, err := …); it shadows it.
//   - A fragment's own imports are kept; every other package it names is
//     imported from snippetImports (the module's packages and the standard
//     library's the docs use), as goimports would. A name in neither is
//     "undefined", as in any program.
//   - "..." or "…" alone on a line, or as a block's body ({ … }), stands
//     for the reader's code and is dropped.
//   - A variable declared and not used is no error (a fragment shows a
//     call; what the reader does with its result is theirs). Anything
//     else the compiler refuses is, an unused import or label included.
//   - A block naming another library's package (snippetElsewhere: the
//     side-by-side of docs/library.md) cannot compile in this module: it
//     must be, word for word, the body of a function of
//     bench/redis/sidebyside_test.go, which that module compiles and runs.
//
// The packages come from one `go list -export` of the module (export data
// from the build cache, offline: GOPROXY=off, -mod=readonly, this
// module's go.mod), so the cost is one go command, not one build per
// block. Each failure names the page and line.
func TestDocGoSnippets(t *testing.T) {
	blocks := goBlocks(t)
	if len(blocks) < 15 {
		t.Fatalf("found %d go blocks in README.md and docs/*.md; the extraction is broken", len(blocks))
	}
	sideBySide, err := os.ReadFile(filepath.Join(Root(), "bench", "redis", "sidebyside_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	problems, checked := snippetCheck(t, blocks, sideBySide)
	for _, p := range problems {
		t.Error(p)
	}
	t.Logf("%d go blocks: %d type-checked, the other %d another library's (bench/redis)", len(blocks), checked, len(blocks)-checked)
	if checked < 12 {
		t.Errorf("type-checked %d of %d go blocks; the rest are taken for other libraries' code, which is misread", checked, len(blocks))
	}
}

// TestDocGoSnippetsCatch: TestDocGoSnippets's check refuses what a
// broken block looks like, and names the page and line of each fault.
func TestDocGoSnippetsCatch(t *testing.T) {
	sideBySide := []byte("package main\n\nfunc a() int {\n\treturn rate.Every(1)\n}\n")
	for _, c := range []struct {
		name, text, want string
	}{
		{"renamed function", "lim, err := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.GCRA, sluice.PerMinut(10))\n", "docs/x.md:11:85: undefined: sluice.PerMinut"},
		{"wrong argument", "\nd, err := lim.Allow(ctx, 42)\n", "docs/x.md:12:26: cannot use 42"},
		{"missing field", "h := httplimit.Middleware(httplimit.Options{Limiter: lim, Rule: \"api\"})\n", "docs/x.md:11:59: unknown field Rule"},
		{"unknown package", "x := frobnicate.New()\n", "docs/x.md:11:6: undefined: frobnicate"},
		{"expression not used", "httplimit.Options{Limiter: lim}\n", "docs/x.md:11:1: httplimit.Options{…} (value of struct type httplimit.Options) is not used"},
		{"struct field alone", "res := clientip.Resolver{}\nKeyFunc: httplimit.KeyByClientIP(res, clientip.Prefixes{})\n", "docs/x.md:12:1: label KeyFunc declared and not used"},
		{"syntax", "if d.Allowed {\n", "docs/x.md:10: the ```go block does not parse: docs/x.md:"},
		{"unused import", "import \"os\"\n\nd, _ := lim.Allow(ctx, \"k\")\n", "docs/x.md:11:8: \"os\" imported and not used"},
		{"whole file", "package main\n\nfunc main() { sluice.Nope() }\n", "docs/x.md:13:15: undefined: sluice"},
		{"other library, not the bench's", "return rate.Every(2)\n", "docs/x.md:10: uses rate"},
	} {
		t.Run(c.name, func(t *testing.T) {
			problems, _ := snippetCheck(t, []goBlock{{File: "docs/x.md", Line: 10, Text: c.text}}, sideBySide)
			if len(problems) == 0 {
				t.Fatalf("the block\n%s\npasses; want a failure naming %q", c.text, c.want)
			}
			if !strings.Contains(problems[0], c.want) {
				t.Errorf("the block\n%s\nfails with\n%s\nwant it to name %q", c.text, strings.Join(problems, "\n"), c.want)
			}
		})
	}
	for _, ok := range []string{
		"lim, _ := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.GCRA, sluice.PerMinute(60))\nif err := ctx.Err(); err != nil { … }\n...\nreturn lim\n",
		"import (\n\t\"github.com/sluicehq/sluice\"\n)\n\nd, err := lim.Allow(ctx, \"k\")\nif !d.Allowed {\n\treturn sluice.ErrInvalidCost\n}\n",
		"return rate.Every(1)\n",
	} {
		if problems, _ := snippetCheck(t, []goBlock{{File: "docs/x.md", Line: 10, Text: ok}}, sideBySide); len(problems) > 0 {
			t.Errorf("the block\n%s\nfails with\n%s\nbut is right", ok, strings.Join(problems, "\n"))
		}
	}
}

// A goBlock is a ```go fenced block of a Markdown file.
type goBlock struct {
	File string // relative to the repository's root
	Line int    // of the opening fence
	Text string // the lines between the fences, without the fence's indentation
}

func (b goBlock) String() string { return fmt.Sprintf("%s:%d", b.File, b.Line) }

var goFence = regexp.MustCompile("^( *)```go\\s*$")

// goBlocks returns the go blocks of README.md and docs/*.md.
func goBlocks(t *testing.T) []goBlock {
	t.Helper()
	var out []goBlock
	for _, b := range fencedBlocks(t, goFence, "go") {
		out = append(out, goBlock{File: b.file, Line: b.line, Text: b.text})
	}
	return out
}

// snippetGivens declares what the docs' fragments leave to the reader.
const snippetGivens = `package snippet

import (
	"context"
	"io"
	"net/http"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
)

var (
	ctx         context.Context
	r           *http.Request
	w           http.ResponseWriter
	lim         *sluice.Limiter
	mux         *http.ServeMux
	yourHandler http.Handler
	apiHandler  http.Handler
	clientIP    string
	loginOnly   httplimit.KeyFunc
	planOf      func(*http.Request) string
	traceReader io.Reader
	svgFile     io.Writer
)
`

// snippetImports are the packages a fragment may name without importing
// them, by name.
var snippetImports = map[string]string{
	"sluice":     "github.com/sluicehq/sluice",
	"clientip":   "github.com/sluicehq/sluice/clientip",
	"fleet":      "github.com/sluicehq/sluice/fleet",
	"httplimit":  "github.com/sluicehq/sluice/httplimit",
	"memstore":   "github.com/sluicehq/sluice/memstore",
	"redisstore": "github.com/sluicehq/sluice/redisstore",
	"sluicetest": "github.com/sluicehq/sluice/sluicetest",
	"sim":        "github.com/sluicehq/sluice/internal/sim",
	"context":    "context",
	"tls":        "crypto/tls",
	"errors":     "errors",
	"fmt":        "fmt",
	"io":         "io",
	"log":        "log",
	"slog":       "log/slog",
	"net":        "net",
	"http":       "net/http",
	"netip":      "net/netip",
	"os":         "os",
	"strconv":    "strconv",
	"strings":    "strings",
	"sync":       "sync",
	"time":       "time",
}

// snippetElsewhere are the packages of other libraries the docs show.
var snippetElsewhere = map[string]bool{"httprate": true, "redis_rate": true, "redis": true, "rate": true}

var (
	reElidedLine = regexp.MustCompile(`(?m)^[ \t]*(\.\.\.|…)[ \t]*$`)
	reElidedBody = regexp.MustCompile(`\{[ \t]*(\.\.\.|…)[ \t]*\}`)
)

// snippet is a block made into a file to type-check.
type snippet struct {
	block goBlock
	file  *ast.File
	whole bool // a whole file: no givens
}

// snippetCheck type-checks the blocks by the rules of TestDocGoSnippets
// and returns what is wrong ("page:line: …") and how many it
// type-checked. sideBySide is the source whose function bodies other
// libraries' blocks must be.
func snippetCheck(t *testing.T, blocks []goBlock, sideBySide []byte) (problems []string, checked int) {
	t.Helper()
	fset := token.NewFileSet()
	givens, err := parser.ParseFile(fset, "givens.go", snippetGivens, 0)
	if err != nil {
		t.Fatal(err)
	}
	given := map[string]bool{}
	for name := range givens.Scope.Objects {
		given[name] = true
	}
	bodies := functionBodies(t, sideBySide)
	var snippets []snippet
	paths := map[string]bool{}
	for _, imp := range givens.Imports {
		paths[strings.Trim(imp.Path.Value, `"`)] = true
	}
	for _, b := range blocks {
		s, elsewhere, err := snippetFile(fset, b, given)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		if elsewhere != "" {
			if !bodies[strings.TrimSpace(b.Text)] {
				problems = append(problems, fmt.Sprintf("%s: uses %s, another library's package, so it cannot compile in this module: it must be the body of a function of bench/redis/sidebyside_test.go (which bench/redis compiles and runs), word for word, and is not", b, elsewhere))
			}
			continue
		}
		for _, imp := range s.file.Imports {
			paths[strings.Trim(imp.Path.Value, `"`)] = true
		}
		snippets = append(snippets, s)
	}
	if len(snippets) == 0 {
		return problems, 0
	}
	imp := importer.ForCompiler(fset, "gc", exportData(t, paths))
	for _, s := range snippets {
		files := []*ast.File{s.file}
		if !s.whole {
			files = append(files, givens)
		}
		var errs []string
		conf := types.Config{Importer: imp, Error: func(err error) {
			if te, ok := err.(types.Error); ok && te.Soft && strings.Contains(te.Msg, "declared and not used") && !strings.HasPrefix(te.Msg, "label ") {
				return
			}
			errs = append(errs, err.Error())
		}}
		conf.Check("snippet", fset, files, nil)
		checked++
		if len(errs) > 0 {
			problems = append(problems, fmt.Sprintf("%s: the ```go block does not compile:\n\t%s\nthe block:\n%s", s.block, strings.Join(errs, "\n\t"), s.block.Text))
		}
	}
	return problems, checked
}

// snippetFile makes a block into a file, its positions the page's (a
// //line directive before its text). elsewhere is the first other
// library's package a fragment names, if any.
func snippetFile(fset *token.FileSet, b goBlock, given map[string]bool) (s snippet, elsewhere string, err error) {
	text := reElidedBody.ReplaceAllString(reElidedLine.ReplaceAllString(b.Text, ""), "{}")
	// The file's name has no directory: a //line directive's name is
	// relative to it.
	at := func(line int) string { return fmt.Sprintf("//line %s:%d:1\n", b.File, line) }
	const name = "snippet.go"
	if wholeFile(text) {
		f, err := parser.ParseFile(fset, name, at(b.Line+1)+text, parser.ParseComments)
		if err != nil {
			return s, "", fmt.Errorf("%s: the ```go block does not parse: %v", b, err)
		}
		return snippet{block: b, file: f, whole: true}, "", nil
	}
	// The leading import declarations stay at the file's level.
	lines := strings.SplitAfter(text, "\n")
	head := 0
	if f, err := parser.ParseFile(token.NewFileSet(), "", "package p\n"+text, parser.ImportsOnly); err == nil && len(f.Decls) > 0 {
		end := f.Decls[len(f.Decls)-1].End()
		head = len(strings.Split(("package p\n" + text)[:end-1], "\n")) - 1 // lines of text through the last import
	}
	build := func(auto []string) string {
		var src strings.Builder
		src.WriteString("package snippet\n\n")
		for _, p := range auto {
			fmt.Fprintf(&src, "import %q\n", p)
		}
		src.WriteString(at(b.Line + 1))
		src.WriteString(strings.Join(lines[:head], ""))
		src.WriteString("\nfunc _() (_ any) {\n")
		src.WriteString(at(b.Line + 1 + head))
		src.WriteString(strings.Join(lines[head:], ""))
		src.WriteString("\n" + at(b.Line+1+strings.Count(text, "\n")) + "return\n}\n")
		return src.String()
	}
	f, err := parser.ParseFile(fset, name, build(nil), parser.ParseComments)
	if err != nil {
		return s, "", fmt.Errorf("%s: the ```go block does not parse: %v", b, err)
	}
	imported := map[string]bool{}
	for _, imp := range f.Imports {
		p := strings.Trim(imp.Path.Value, `"`)
		imported[p[strings.LastIndex(p, "/")+1:]] = true
		if imp.Name != nil {
			imported[imp.Name.Name] = true
		}
	}
	var auto []string
	seen := map[string]bool{}
	for _, id := range f.Unresolved {
		n := id.Name
		if seen[n] || given[n] || imported[n] {
			continue
		}
		seen[n] = true
		if snippetElsewhere[n] && elsewhere == "" {
			elsewhere = n
		}
		if p, ok := snippetImports[n]; ok {
			auto = append(auto, p)
		}
	}
	if elsewhere != "" {
		return s, elsewhere, nil
	}
	sort.Strings(auto)
	f, err = parser.ParseFile(fset, name, build(auto), parser.ParseComments)
	if err != nil {
		return s, "", fmt.Errorf("%s: %v", b, err)
	}
	return snippet{block: b, file: f}, "", nil
}

// wholeFile reports whether text's first line of code is a package
// clause.
func wholeFile(text string) bool {
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "//") {
			return strings.HasPrefix(l, "package ")
		}
	}
	return false
}

// functionBodies returns the bodies of src's functions, one tab of
// indentation removed, trimmed.
func functionBodies(t *testing.T, src []byte) map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "sidebyside_test.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		body := string(src[fset.Position(fd.Body.Lbrace).Offset+1 : fset.Position(fd.Body.Rbrace).Offset])
		var lines []string
		for _, l := range strings.Split(body, "\n") {
			lines = append(lines, strings.TrimPrefix(l, "\t"))
		}
		out[strings.TrimSpace(strings.Join(lines, "\n"))] = true
	}
	return out
}

// exports maps an import path to its export data, from the go list
// calls so far.
var exports = map[string]string{}

// exportData runs one `go list -export` of paths and their dependencies
// (those no earlier call listed; the first lists every package of
// snippetImports too), offline, and returns the importer's lookup of the
// export data it names.
func exportData(t *testing.T, paths map[string]bool) func(path string) (io.ReadCloser, error) {
	t.Helper()
	lookup := func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("%s: no export data (go list -export names none)", path)
		}
		return os.Open(file)
	}
	args := []string{"list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}"}
	if len(exports) == 0 {
		for _, p := range snippetImports {
			paths[p] = true
		}
	}
	for p := range paths {
		if _, ok := exports[p]; !ok {
			args = append(args, p)
		}
	}
	if len(args) == 5 {
		return lookup
	}
	sort.Strings(args[5:])
	cmd := exec.Command("go", args...)
	cmd.Dir = Root()
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly", "GOPROXY=off", "GOTOOLCHAIN=local")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if p, file, ok := strings.Cut(sc.Text(), "\t"); ok && file != "" {
			exports[p] = file
		}
	}
	return lookup
}
