package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

// The bound printed is README's: a fraction 2k·(n−1)/n · interval/P of a
// limit of R per period P asked k× over (λ = k·R/P), 2.2 % for 3
// instances, 10×, sync: 100ms and a per-minute rule.
func TestNominalBound(t *testing.T) {
	n, k, R, P := 3, float64(boundOverload), float64(boundLimit), time.Minute
	got := nominalBound(n, k*R/P.Seconds(), boundSync)
	want := 2 * k * float64(n-1) / float64(n) * boundSync.Seconds() / P.Seconds() * R
	if math.Abs(got-want) > 1e-9 || math.Abs(got-22.22) > 0.01 {
		t.Fatalf("nominalBound = %.4f, want %.4f (2.2 %% of %v)", got, want, R)
	}
}

// "÷ plain (best)" divides the best runs, which may be two different ones;
// "÷ plain in each run" divides within one run, run by run.
func TestReportRatios(t *testing.T) {
	cells := []cell{{mode: "plain", keys: 1}, {mode: "sync", keys: 1}}
	all := [][]result{
		{{rate: 200, n: 1}, {rate: 150, n: 1}}, // run 1: plain's best
		{{rate: 100, n: 1}, {rate: 180, n: 1}}, // run 2: sync's best
	}
	best := []result{all[0][0], all[1][1]}
	var b strings.Builder
	report(&b, options{conc: 64, runs: 2}, cells, best, all, "0 0 0")
	var row string
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(l, "| `sync: 100ms` |") {
			row = l
		}
	}
	f := strings.Split(row, " | ")
	if len(f) < 6 {
		t.Fatalf("no sync row in:\n%s", b.String())
	}
	if f[4] != "0.90×" || f[5] != "0.75×, 1.80×" {
		t.Fatalf("sync row: ÷ plain (best) %q, in each run %q; want 0.90× (180/200) and 0.75×, 1.80× (150/200, 180/100)\n%s", f[4], f[5], row)
	}
}

// With -unix, a Unix-socket row divides by the Unix-socket plain, not by
// TCP's; the second table divides each Unix-socket cell by its TCP twin.
func TestReportUnixRatios(t *testing.T) {
	cells := []cell{{mode: "plain", keys: 1}, {mode: "plain", keys: 1, unix: true}, {mode: "sync", keys: 1}, {mode: "sync", keys: 1, unix: true}}
	all := [][]result{{{rate: 100, n: 1}, {rate: 120, n: 1}, {rate: 200, n: 1}, {rate: 300, n: 1}}}
	var b, u strings.Builder
	report(&b, options{conc: 64, runs: 1, unix: true}, cells, all[0], all, "0 0 0")
	reportUnix(&u, cells, all[0], all)
	rows := map[string][]string{}
	for _, l := range strings.Split(b.String()+u.String(), "\n") {
		f := strings.Split(l, " | ")
		if len(f) > 1 {
			rows[f[0]+" | "+f[1]] = f
		}
	}
	if f := rows["| `sync: 100ms`, Unix socket | 1"]; len(f) < 5 || f[4] != "2.50×" {
		t.Errorf("Unix-socket sync row %q: want ÷ plain 2.50× (300/120)\n%s", f, b.String())
	}
	if f := rows["| `sync: 100ms` | 1"]; len(f) < 5 || f[4] != "2.00×" {
		t.Errorf("TCP sync row %q: want ÷ plain 2.00× (200/100)\n%s", f, b.String())
	}
	if !strings.Contains(u.String(), "| sync | 1 | admitted | 200 | 300 | 1.50× | 1.50× |") ||
		!strings.Contains(u.String(), "| plain | 1 | admitted | 100 | 120 | 1.20× | 1.20× |") {
		t.Errorf("Unix ÷ TCP: want sync 300/200 = 1.50× and plain 120/100 = 1.20×, got\n%s", u.String())
	}
}
