package main

import (
	"strings"
	"testing"
)

// Runs at two GOMAXPROCS (go test -cpu 2,16) are two rows each, and a row
// is divided by its reference at the same GOMAXPROCS: their medians never
// mix runs of different parallelism.
func TestParseKeepsGOMAXPROCSApart(t *testing.T) {
	out := `pkg: github.com/sluicehq/sluice/bench
BenchmarkHotKey/sluice-gcra-2         	 1000	        50.0 ns/op
BenchmarkHotKey/sluice-gcra-2         	 1000	        50.0 ns/op
BenchmarkHotKey/sluice-gcra-16        	 1000	       900.0 ns/op
BenchmarkHotKey/xtimerate-2           	 1000	        40.0 ns/op
BenchmarkHotKey/xtimerate-16          	 1000	       100.0 ns/op
BenchmarkHotKey/xtimerate-16          	 1000	       100.0 ns/op
`
	rows := parse(nil, strings.NewReader(out))
	if len(rows) != 4 {
		for _, r := range rows {
			t.Logf("row %s/%s procs %q: %v", r.family, r.name, r.procs, r.metrics)
		}
		t.Fatalf("%d rows, want 4 (2 contenders × 2 GOMAXPROCS)", len(rows))
	}
	var b strings.Builder
	printFamily(&b, "HotKey", rows)
	for _, want := range []string{
		"| sluice-gcra (GOMAXPROCS 2) | 50.0 | 0.0 | 0 | 0 | — | 2 | 1.25× |",
		"| sluice-gcra (GOMAXPROCS 16) | 900.0 | 0.0 | 0 | 0 | — | 1 | 9.00× |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no row %q in:\n%s", want, b.String())
		}
	}
}

// One GOMAXPROCS: the names as the benchmarks give them, as before.
func TestParseOneGOMAXPROCS(t *testing.T) {
	out := "BenchmarkHotKey/sluice-gcra-2 1000 50.0 ns/op\nBenchmarkHotKey/xtimerate-2 1000 40.0 ns/op\n"
	var b strings.Builder
	printFamily(&b, "HotKey", parse(nil, strings.NewReader(out)))
	if want := "| sluice-gcra | 50.0 | 0.0 | 0 | 0 | — | 1 | 1.25× |"; !strings.Contains(b.String(), want) {
		t.Errorf("no row %q in:\n%s", want, b.String())
	}
}
