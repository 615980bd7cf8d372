package doctest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// publicPackages are the module's importable packages, by the name the
// docs qualify their API with, and their directories under the root.
var publicPackages = map[string]string{
	"sluice":     ".",
	"memstore":   "memstore",
	"redisstore": "redisstore",
	"fleet":      "fleet",
	"httplimit":  "httplimit",
	"clientip":   "clientip",
	"sluicetest": "sluicetest",
}

// reAPIName finds a qualified name of the module's public API in text:
// `fleet.NewLease`, `redisstore.Store.RunIDs`, `sluice.Limiter.AllowAt`.
var reAPIName = regexp.MustCompile(`\b(sluice|memstore|redisstore|fleet|httplimit|clientip|sluicetest)\.([A-Z]\w*)(?:\.([A-Z]\w*))?`)

// reTestFunc is the name of a test, benchmark, fuzz target or example
// (`redisstore.BenchmarkShardHotKey`), which no package exports.
var reTestFunc = regexp.MustCompile(`^(?:Test|Benchmark|Fuzz|Example)[A-Z_]`)

// exportedAPI returns the exported names of the package in dir (tests
// left out): its top-level functions, types, variables and constants,
// and "Type.Member" for each exported method and struct field of its
// types (embedded fields by their type's name).
func exportedAPI(t *testing.T, dir string) map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	names := map[string]bool{}
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					names[d.Name.Name] = true
					continue
				}
				typ := d.Recv.List[0].Type
				if s, ok := typ.(*ast.StarExpr); ok {
					typ = s.X
				}
				if g, ok := typ.(*ast.IndexExpr); ok {
					typ = g.X
				}
				if id, ok := typ.(*ast.Ident); ok {
					names[id.Name+"."+d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, sp := range d.Specs {
					switch sp := sp.(type) {
					case *ast.ValueSpec:
						for _, n := range sp.Names {
							names[n.Name] = true
						}
					case *ast.TypeSpec:
						names[sp.Name.Name] = true
						st, ok := sp.Type.(*ast.StructType)
						if !ok {
							continue
						}
						for _, fld := range st.Fields.List {
							for _, n := range fld.Names {
								names[sp.Name.Name+"."+n.Name] = true
							}
							if len(fld.Names) == 0 { // embedded: by its type's name
								typ := fld.Type
								if s, ok := typ.(*ast.StarExpr); ok {
									typ = s.X
								}
								switch e := typ.(type) {
								case *ast.Ident:
									names[sp.Name.Name+"."+e.Name] = true
								case *ast.SelectorExpr:
									names[sp.Name.Name+"."+e.Sel.Name] = true
								}
							}
						}
					}
				}
			}
		}
	}
	return names
}

// apiNameProblems checks the qualified names of text (page) against api
// (package → its exported names): "pkg.Name" must be a name of pkg, and
// "pkg.Name.Member", when Name is one of its types, a method or field of
// that type.
func apiNameProblems(page, text string, api map[string]map[string]bool) (problems []string, named int) {
	for i, l := range strings.Split(text, "\n") {
		for _, m := range reAPIName.FindAllStringSubmatch(l, -1) {
			pkg, name, member := m[1], m[2], m[3]
			if reTestFunc.MatchString(name) {
				continue // a test's name: TestDocTestNames checks it
			}
			named++
			names := api[pkg]
			switch {
			case !names[name]:
				problems = append(problems, page+":"+strconv.Itoa(i+1)+": "+m[0]+": package "+pkg+" has no exported "+name)
			case member != "" && !names[name+"."+member]:
				problems = append(problems, page+":"+strconv.Itoa(i+1)+": "+m[0]+": "+pkg+"."+name+" has no method or field "+member)
			}
		}
	}
	return problems, named
}

// TestDocAPINames: every qualified name of the module's public API that
// the product's docs write (`fleet.NewLease`, `sluice.ErrInvalidLimit`,
// `redisstore.Store.RunIDs`) is one the package exports, so that a
// renamed function or option does not leave the prose pointing at
// nothing. (TestDocGoSnippets type-checks the Go blocks; this is the
// prose around them.)
func TestDocAPINames(t *testing.T) {
	api := map[string]map[string]bool{}
	for pkg, dir := range publicPackages {
		api[pkg] = exportedAPI(t, filepath.Join(Root(), dir))
	}
	var named int
	for _, page := range productPages(t) {
		b, err := os.ReadFile(filepath.Join(Root(), page))
		if err != nil {
			t.Fatal(err)
		}
		problems, n := apiNameProblems(page, string(b), api)
		named += n
		for _, p := range problems {
			t.Error(p)
		}
	}
	if named < 50 {
		t.Errorf("found %d qualified API names in the docs; the search is broken", named)
	}
}

// TestDocAPINamesCatch: the check refuses a name a package does not
// export and a member its type does not have, and passes real ones.
func TestDocAPINamesCatch(t *testing.T) {
	api := map[string]map[string]bool{}
	for pkg, dir := range publicPackages {
		api[pkg] = exportedAPI(t, filepath.Join(Root(), dir))
	}
	for _, c := range []struct {
		line string
		want int
	}{
		{"`fleet.NewLease(redisStore, fleet.LeaseOptions{})`, `sluice.ErrInvalidLimit`", 0},
		{"`redisstore.Store.RunIDs`, `sluice.Limiter.AllowAt`, `redisstore.Options.AlwaysPipeline`", 0},
		{"`fleet.NewLeases`", 1},
		{"`sluice.Limiter.AllowEventually`", 1},
		{"`memstore.Options.MaxKey` and `httplimit.KeyByIP`", 2},
		{"sluice.yaml, github.com/sluicehq/sluice/fleet, `redisstore.BenchmarkShardHotKey`", 0},
	} {
		problems, _ := apiNameProblems("x.md", c.line, api)
		if len(problems) != c.want {
			t.Errorf("%q: %d problems, want %d: %q", c.line, len(problems), c.want, problems)
		}
		for _, p := range problems {
			if !strings.HasPrefix(p, "x.md:1: ") {
				t.Errorf("%q: %q does not name the page and line", c.line, p)
			}
		}
	}
}
