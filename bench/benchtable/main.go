// Command benchtable reads `go test -bench` output (from files or stdin),
// takes the median of every metric over repeated runs (-count), and prints
// Markdown tables with the ratios the Sluice performance targets are stated
// in: each row against a reference row of the same family, and parallel
// against serial throughput.
//
//	go run ./benchtable bench-core.txt
package main

import (
	"bufio"
	"cmp"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// refs names the reference row of each family: ratio = row ÷ reference.
var refs = map[string]string{
	"HotKey":         "xtimerate",
	"HotKeyParallel": "xtimerate",
	"HotKeyDeny":     "xtimerate",
	"Keys1M":         "xtimerate-map",
	"Keys1MParallel": "xtimerate-map",
	"Memory1M":       "xtimerate-map",
}

// line matches "BenchmarkFamily/name-2  N  v unit  v unit …".
var line = regexp.MustCompile(`^Benchmark([^/\s]+)/(\S+?)(?:-(\d+))?\s+\d+\s+(.*)$`)

type row struct {
	family, name string
	procs        string // GOMAXPROCS, the name's -N suffix ("" without one)
	metrics      map[string][]float64
}

func main() {
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: benchtable [file …]  (reads stdin without files)")
	}
	flag.Parse()
	var rows []*row
	if flag.NArg() == 0 {
		rows = parse(rows, os.Stdin)
	}
	for _, name := range flag.Args() {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchtable:", err)
			os.Exit(1)
		}
		rows = parse(rows, f)
		f.Close()
	}
	var families []string
	for _, r := range rows {
		if !slices.Contains(families, r.family) {
			families = append(families, r.family)
		}
	}
	for _, fam := range families {
		printFamily(os.Stdout, fam, rows)
	}
	printSpeedup(rows, "Calibrate", "CalibrateParallel")
	printSpeedup(rows, "Keys1M", "Keys1MParallel")
	printSpeedup(rows, "HotKey", "HotKeyParallel")
	printSpeedup(rows, "memstore/Keys1M", "memstore/Keys1MParallel")
}

// parse adds to rows the results of `go test -bench` output r: one row
// per benchmark, its metrics over the runs.
func parse(rows []*row, r io.Reader) []*row {
	index := map[string]*row{}
	for _, rw := range rows {
		index[rw.family+"/"+rw.name+"-"+rw.procs] = rw
	}
	sc := bufio.NewScanner(r)
	pkg := ""
	for sc.Scan() {
		t := sc.Text()
		if p, ok := strings.CutPrefix(t, "pkg: "); ok {
			pkg = p
			continue
		}
		m := line.FindStringSubmatch(t)
		if m == nil {
			continue
		}
		fam := m[1]
		if strings.HasSuffix(pkg, "/memstore") {
			fam = "memstore/" + fam
		}
		k := fam + "/" + m[2] + "-" + m[3]
		rw := index[k]
		if rw == nil {
			rw = &row{family: fam, name: m[2], procs: m[3], metrics: map[string][]float64{}}
			index[k] = rw
			rows = append(rows, rw)
		}
		f := strings.Fields(m[4])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err == nil {
				rw.metrics[f[i+1]] = append(rw.metrics[f[i+1]], v)
			}
		}
	}
	return rows
}

func median(v []float64) (float64, bool) {
	if len(v) == 0 {
		return 0, false
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2], true
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2, true
}

func find(rows []*row, fam, name, procs string) *row {
	for _, r := range rows {
		if r.family == fam && r.name == name && r.procs == procs {
			return r
		}
	}
	return nil
}

func printFamily(w io.Writer, fam string, rows []*row) {
	// Runs at several GOMAXPROCS (go test -cpu 2,16) are rows of their
	// own, named with it, each divided by the reference at the same one.
	var procs []string
	for _, r := range rows {
		if r.family == fam && !slices.Contains(procs, r.procs) {
			procs = append(procs, r.procs)
		}
	}
	name := func(r *row) string {
		if len(procs) > 1 {
			return fmt.Sprintf("%s (GOMAXPROCS %s)", r.name, cmp.Or(r.procs, "1"))
		}
		return r.name
	}
	refOf := func(r *row) *row { return find(rows, fam, refs[fam], r.procs) }
	ref := find(rows, fam, refs[fam], procs[0])
	memory := strings.HasSuffix(fam, "Memory1M")
	fmt.Fprintf(w, "\n### %s\n\n", fam)
	if memory {
		fmt.Fprintln(w, "| contender | B/key | B/key+str | ns/key (fill) | runs | B/key ÷ "+refName(ref)+" |")
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|")
	} else {
		fmt.Fprintln(w, "| contender | ns/op | cpu-ns/op | B/op | allocs/op | admit/op | runs | ns/op ÷ "+refName(ref)+" | cpu-ns/op ÷ "+refName(ref)+" |")
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	}
	for _, r := range rows {
		if r.family != fam {
			continue
		}
		if memory {
			b, _ := median(r.metrics["B/key"])
			bs, _ := median(r.metrics["B/key+str"])
			ns, _ := median(r.metrics["ns/key"])
			fmt.Fprintf(w, "| %s | %.1f | %.1f | %.0f | %d | %s |\n", name(r), b, bs, ns, len(r.metrics["B/key"]), ratio(r, refOf(r), "B/key"))
			continue
		}
		ns, _ := median(r.metrics["ns/op"])
		bop, _ := median(r.metrics["B/op"])
		al, _ := median(r.metrics["allocs/op"])
		adm := "—"
		if a, ok := median(r.metrics["admit/op"]); ok {
			adm = strconv.FormatFloat(a, 'f', 2, 64)
		}
		cpu, _ := median(r.metrics["cpu-ns/op"])
		fmt.Fprintf(w, "| %s | %.1f | %.1f | %.0f | %.0f | %s | %d | %s | %s |\n", name(r), ns, cpu, bop, al, adm, len(r.metrics["ns/op"]), ratio(r, refOf(r), "ns/op"), ratio(r, refOf(r), "cpu-ns/op"))
	}
}

func refName(ref *row) string {
	if ref == nil {
		return "—"
	}
	return ref.name
}

func ratio(r, ref *row, metric string) string {
	if ref == nil {
		return "—"
	}
	a, ok1 := median(r.metrics[metric])
	b, ok2 := median(ref.metrics[metric])
	if !ok1 || !ok2 || b == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// printSpeedup prints parallel throughput ÷ serial throughput, which is
// serial ns/op ÷ parallel ns/op (RunParallel's ns/op is wall time per
// operation over all goroutines).
func printSpeedup(rows []*row, serial, parallel string) {
	several := false // serial rows at more than one GOMAXPROCS
	for _, r := range rows {
		several = several || r.family == serial && r.procs != rows[0].procs
	}
	var out []string
	for _, r := range rows {
		if r.family != serial {
			continue
		}
		p := find(rows, parallel, r.name, r.procs)
		if p == nil {
			continue
		}
		s, _ := median(r.metrics["ns/op"])
		q, _ := median(p.metrics["ns/op"])
		if q == 0 {
			continue
		}
		label := r.name
		if several {
			label = fmt.Sprintf("%s (GOMAXPROCS %s)", r.name, cmp.Or(r.procs, "1"))
		}
		out = append(out, fmt.Sprintf("| %s | %.1f | %.1f | %.2f× |", label, s, q, s/q))
	}
	if len(out) == 0 {
		return
	}
	fmt.Printf("\n### %s: parallel ÷ serial throughput\n\n", serial)
	fmt.Println("| contender | serial ns/op | parallel ns/op | speedup |")
	fmt.Println("|---|---:|---:|---:|")
	for _, o := range out {
		fmt.Println(o)
	}
}
