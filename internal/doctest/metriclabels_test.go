package doctest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// reDocLabels finds a metric written with its labels in the docs:
// sluice_rule_fleet_mode{rule,mode}, sluice_clients_gone_total{stage="held"}.
var reDocLabels = regexp.MustCompile(`\b(sluice_[a-z0-9_]*[a-z0-9])\{([^}\x60]*)\}`)

// unlabelled are the constructors of metrics without labels: a name given
// to one of them has none.
var unlabelled = map[string]bool{"NewCounter": true, "NewGauge": true, "NewHistogram": true, "NewSummary": true,
	"NewCounterFunc": true, "NewGaugeFunc": true, "CounterFunc": true, "GaugeFunc": true}

// TestDocMetricLabels: every label the docs write in a metric's braces
// (sluice_deferred_deliveries_total{rule,status}, or {stage="held"}) is a
// label the code gives that metric, so a query copied from them selects
// series. TestDocMetricNames checks the names only; the metrics tables of
// docs/http.md and docs/envoy.md are also held to a scrape
// (internal/server), but the metrics of the fleet, the hot keys and the
// deferral queue are named in prose only.
func TestDocMetricLabels(t *testing.T) {
	code := codeMetricLabels(t)
	if len(code) < 40 {
		t.Fatalf("tied %d metric names to their labels in the code; the search is broken", len(code))
	}
	pages := append(mustGlob(filepath.Join(Root(), "docs", "*.md")), filepath.Join(Root(), "README.md"))
	var checked int
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(Root(), p)
		for n, line := range strings.Split(string(b), "\n") {
			for _, problem := range labelProblems(line, code) {
				t.Errorf("%s:%d: %s", rel, n+1, problem)
			}
			checked += len(reDocLabels.FindAllString(line, -1))
		}
	}
	if checked < 20 {
		t.Errorf("checked %d metrics written with labels in the docs; the search is broken", checked)
	}
}

// TestDocMetricLabelsCatch: the check refuses a label the code does not
// give a metric, and a metric whose labels the code does not tell.
func TestDocMetricLabelsCatch(t *testing.T) {
	code := map[string][]string{"sluice_x_total": {"rule", "status"}, "sluice_y": nil}
	for _, c := range []struct {
		line string
		want []string
	}{
		{"`sluice_x_total{rule,status}` and `sluice_x_total{status=\"2xx\"}`", nil},
		{"`sluice_x_total{rule,result}`", []string{`sluice_x_total{rule,result}: no label "result" (the code's: rule, status)`}},
		{"`sluice_y{rule}`", []string{`sluice_y{rule}: no label "rule" (the code's: none)`}},
		{"`sluice_z{rule}`", []string{`sluice_z{rule}: the code's labels of sluice_z are not known (a metric made in a way codeMetricLabels does not read?)`}},
	} {
		if got := labelProblems(c.line, code); !slices.Equal(got, c.want) {
			t.Errorf("%s: %q, want %q", c.line, got, c.want)
		}
	}
}

// labelProblems checks the metrics written with labels in line against
// code (metric name → its labels).
func labelProblems(line string, code map[string][]string) []string {
	var out []string
	for _, m := range reDocLabels.FindAllStringSubmatch(line, -1) {
		name, list := m[1], m[2]
		labels, known := code[name]
		if !known {
			out = append(out, m[0]+": the code's labels of "+name+" are not known (a metric made in a way codeMetricLabels does not read?)")
			continue
		}
		for _, item := range strings.Split(list, ",") {
			l, _, _ := strings.Cut(item, "=")
			l = strings.TrimSpace(l)
			if !slices.Contains(labels, l) {
				have := strings.Join(labels, ", ")
				if have == "" {
					have = "none"
				}
				out = append(out, m[0]+": no label "+strconv.Quote(l)+" (the code's: "+have+")")
			}
		}
	}
	return out
}

// codeMetricLabels reads the module's Go code (tests and bench/ left out)
// and ties each metric name it can to its labels: a call given the name (a
// string literal, a constant holding one, or an Opts{Name: …} literal) and
// a []string literal of labels (or a variable of the same file set to
// one), as prometheus.NewDesc and New…Vec take them; or a name given to a
// constructor of unlabelled metrics (labels nil).
func codeMetricLabels(t *testing.T) map[string][]string {
	t.Helper()
	fset := token.NewFileSet()
	var files []*ast.File
	err := filepath.WalkDir(Root(), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "bench" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != Root() {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		files = append(files, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	metricOf := func(e ast.Expr) string { // a string literal naming a metric
		if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if s, err := strconv.Unquote(lit.Value); err == nil && reMetric.MatchString(s) && reMetric.FindString(s) == s {
				return s
			}
		}
		return ""
	}
	consts := map[string]string{} // constant name → the metric it names
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			if vs, ok := n.(*ast.ValueSpec); ok {
				for i, v := range vs.Values {
					if s := metricOf(v); s != "" && i < len(vs.Names) {
						consts[vs.Names[i].Name] = s
					}
				}
			}
			return true
		})
	}
	name := func(e ast.Expr) string {
		switch e := e.(type) {
		case *ast.Ident:
			return consts[e.Name]
		case *ast.SelectorExpr:
			return consts[e.Sel.Name]
		case *ast.CompositeLit:
			for _, el := range e.Elts {
				if kv, ok := el.(*ast.KeyValueExpr); ok {
					if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Name" {
						if s := metricOf(kv.Value); s != "" {
							return s
						}
					}
				}
			}
			return ""
		}
		return metricOf(e)
	}
	stringsOf := func(e ast.Expr) ([]string, bool) { // a []string literal
		cl, ok := e.(*ast.CompositeLit)
		if !ok {
			return nil, false
		}
		at, ok := cl.Type.(*ast.ArrayType)
		if !ok {
			return nil, false
		}
		if id, ok := at.Elt.(*ast.Ident); !ok || id.Name != "string" {
			return nil, false
		}
		out := []string{}
		for _, el := range cl.Elts {
			lit, ok := el.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return nil, false
			}
			s, _ := strconv.Unquote(lit.Value)
			out = append(out, s)
		}
		return out, true
	}
	out := map[string][]string{}
	record := func(pos token.Pos, metric string, labels []string) {
		if prev, ok := out[metric]; ok && !slices.Equal(prev, labels) {
			t.Errorf("%s: %s made with labels %q here and %q elsewhere", fset.Position(pos), metric, labels, prev)
		}
		out[metric] = labels
	}
	for _, f := range files {
		vars := map[string][]string{} // lv := []string{"domain", "descriptor"}
		ast.Inspect(f, func(n ast.Node) bool {
			if as, ok := n.(*ast.AssignStmt); ok {
				for i, rhs := range as.Rhs {
					if l, ok := stringsOf(rhs); ok && i < len(as.Lhs) {
						if id, ok := as.Lhs[i].(*ast.Ident); ok {
							vars[id.Name] = l
						}
					}
				}
			}
			return true
		})
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			var metrics []string
			var labels []string
			var haveLabels bool
			for _, a := range call.Args {
				if s := name(a); s != "" {
					metrics = append(metrics, s)
				}
				if l, ok := stringsOf(a); ok {
					labels, haveLabels = l, true
				} else if id, ok := a.(*ast.Ident); ok && vars[id.Name] != nil {
					labels, haveLabels = vars[id.Name], true
				}
			}
			if len(metrics) != 1 {
				return true
			}
			var fn string
			switch f := call.Fun.(type) {
			case *ast.Ident:
				fn = f.Name
			case *ast.SelectorExpr:
				fn = f.Sel.Name
			}
			switch {
			case haveLabels:
				record(call.Pos(), metrics[0], labels)
			case unlabelled[fn]:
				record(call.Pos(), metrics[0], nil)
			}
			return true
		})
	}
	return out
}
