package sim_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/sim"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func mustLimit(t *testing.T, s string) sluice.Limit {
	t.Helper()
	l, err := sluice.ParseLimit(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// runTrace runs the trace text on a fresh memstore.
func runTrace(t *testing.T, alg sluice.Algorithm, l sluice.Limit, trace string) (string, *sim.Summary, error) {
	t.Helper()
	var out bytes.Buffer
	opt := sim.Options{Algorithm: alg, Limit: l, Store: memstore.New(memstore.Options{}), Record: true}
	sum, err := sim.Run(context.Background(), opt, strings.NewReader(trace), "trace.csv", &out)
	return out.String(), sum, err
}

// TestGolden replays the traces in testdata through every algorithm and
// compares the output and the summary with the golden files
// testdata/NAME.ALGORITHM[.VARIANT].golden (go test -update rewrites them).
func TestGolden(t *testing.T) {
	type run struct {
		trace   string
		alg     sluice.Algorithm
		limit   sluice.Limit
		variant string
	}
	var runs []run
	for _, a := range sluice.Algorithms() {
		runs = append(runs,
			run{"mixed", a, sluice.PerSecond(3), ""},
			run{"boundary", a, sluice.PerSecond(3), ""})
	}
	runs = append(runs,
		run{"spec_example", sluice.SlidingWindowCounter, sluice.PerMinute(10), ""},
		run{"mixed", sluice.LeakyBucket, sluice.PerSecond(3).WithBurst(1), "burst1"},
		run{"mixed", sluice.TokenBucket, sluice.PerSecond(3).WithBurst(6), "burst6"},
		run{"boundary", sluice.SlidingWindowCounter, sluice.PerSecond(3).WithSegments(4), "segments4"},
	)
	for _, r := range runs {
		name := r.trace + "." + r.alg.String()
		if r.variant != "" {
			name += "." + r.variant
		}
		t.Run(name, func(t *testing.T) {
			in, err := os.ReadFile(filepath.Join("testdata", r.trace+".csv"))
			if err != nil {
				t.Fatal(err)
			}
			out, sum, err := runTrace(t, r.alg, r.limit, string(in))
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			var got strings.Builder
			got.WriteString(out)
			got.WriteString("--- summary\n")
			if err := sum.Print(&got); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if got.String() != string(want) {
				t.Errorf("Run(%s, %s, %s) output differs from %s:\ngot:\n%s\nwant:\n%s", r.alg, r.limit, r.trace, golden, got.String(), want)
			}
		})
	}
}

// decisions returns output line i (0 is the first request) split in fields.
func field(t *testing.T, out string, i int) []string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if lines[0] != sim.Header {
		t.Fatalf("first line = %q, want %q", lines[0], sim.Header)
	}
	if i+1 >= len(lines) {
		t.Fatalf("output has %d request lines, want at least %d", len(lines)-1, i+1)
	}
	return strings.Split(lines[i+1], ",")
}

func TestSpecWorkedExample(t *testing.T) {
	in, err := os.ReadFile("testdata/spec_example.csv")
	if err != nil {
		t.Fatal(err)
	}
	out, sum, err := runTrace(t, sluice.SlidingWindowCounter, sluice.PerMinute(10), string(in))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		t, allowed, remaining string
	}{
		{"60.000000", "1", "9"}, {"61.000000", "1", "8"}, {"62.000000", "1", "7"},
		{"63.000000", "1", "6"}, {"64.000000", "1", "5"}, {"65.000000", "1", "4"},
		{"66.000000", "1", "3"}, {"67.000000", "1", "2"}, {"68.000000", "1", "1"},
		{"127.000000", "1", "2"}, // floor(9 × 53/60) + 1 = 8
		{"128.000000", "1", "1"}, // 7 + 2
		{"129.000000", "1", "0"}, // 7 + 3
		{"134.000000", "1", "0"}, // floor(9 × 46/60) + 4 = 10
		{"135.000000", "0", "0"}, // 25%: floor(6.75) + 4 + 1 = 11 > 10
		{"150.000000", "1", "1"}, // 50%: floor(4.5) + 4 + 1 = 9
		{"150.000000", "1", "0"}, // SPEC: floor(4.5) + 5 + 1 = 10, admitted
		{"150.000000", "0", "0"}, // 11 > 10
	} {
		f := field(t, out, i)
		if f[0] != want.t || f[3] != want.allowed || f[4] != want.remaining {
			t.Errorf("request %d: t, allowed, remaining = %s, %s, %s; want %s, %s, %s", i+1, f[0], f[3], f[4], want.t, want.allowed, want.remaining)
		}
	}
	if sum.Requests != 17 || sum.Admitted != 15 || sum.Rejected != 2 {
		t.Errorf("summary = %d requests, %d admitted, %d rejected; want 17, 15, 2", sum.Requests, sum.Admitted, sum.Rejected)
	}
}

func TestOutputFormat(t *testing.T) {
	trace := "12.000250,a\n12.5,a,2\n12.5,a\n13,a,9\n"
	out, _, err := runTrace(t, sluice.LeakyBucket, sluice.PerSecond(2), trace)
	if err != nil {
		t.Fatal(err)
	}
	want := sim.Header + "\n" +
		"12.000250,a,1,1,2,0.000000,0.000000\n" + // leaves at once
		"12.500000,a,2,1,0,0.000000,0.500250\n" + // leaves with its last unit, 2 × 0.5 s after the first
		"12.500000,a,1,0,0,0.000250,0.000000\n" + // would wait 1.000250 s > burst × 0.5 s
		"13.000000,a,9,0,1,-1,0.000000\n" // more than burst+1: never
	if out != want {
		t.Errorf("Run output:\ngot:\n%s\nwant:\n%s", out, want)
	}
}

// TestOutputIsCSV: the output reads back through a CSV reader (as a
// spreadsheet or pandas reads it) with every key as the trace spelled it,
// quotes included.
func TestOutputIsCSV(t *testing.T) {
	keys := []string{`plain`, `"quoted"`, `a"b`, `say "hi" now`, `"`, `é "x"`}
	var trace strings.Builder
	for i, k := range keys {
		fmt.Fprintf(&trace, "%d,%s\n", i, k)
	}
	out, _, err := runTrace(t, sluice.GCRA, sluice.PerSecond(2), trace.String())
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatalf("the output is not CSV: %v\n%s", err, out)
	}
	if len(recs) != len(keys)+1 {
		t.Fatalf("the output has %d records, want the header and %d:\n%s", len(recs), len(keys), out)
	}
	for i, k := range keys {
		if got := recs[i+1][1]; got != k {
			t.Errorf("record %d: key %q read back as %q (output line %q)", i+1, k, got, strings.Split(out, "\n")[i+1])
		}
	}
	if !strings.Contains(out, "\n0.000000,plain,1,") {
		t.Errorf("a plain key is quoted:\n%s", out)
	}
}

func TestSummary(t *testing.T) {
	in, err := os.ReadFile("testdata/mixed.csv")
	if err != nil {
		t.Fatal(err)
	}
	_, sum, err := runTrace(t, sluice.FixedWindow, sluice.PerSecond(3), string(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []sim.KeyCount{
		{Key: "alice", Requests: 10, Admitted: 6, Rejected: 4},
		{Key: "bob", Requests: 3, Admitted: 2, Rejected: 1},
	}
	if len(sum.Keys) != len(want) {
		t.Fatalf("Summary.Keys = %+v, want %+v", sum.Keys, want)
	}
	for i := range want {
		if sum.Keys[i] != want[i] {
			t.Errorf("Summary.Keys[%d] = %+v, want %+v", i, sum.Keys[i], want[i])
		}
	}
	if sum.Requests != 13 || sum.Admitted != 8 || sum.Rejected != 5 {
		t.Errorf("Summary totals = %d/%d/%d, want 13/8/5", sum.Requests, sum.Admitted, sum.Rejected)
	}
	if sum.First != 0 || sum.Last != 2_200_000 {
		t.Errorf("Summary First, Last = %d, %d; want 0, 2200000", sum.First, sum.Last)
	}
	if len(sum.Events) != 13 || sum.Events[12].Key != "bob" || sum.Events[12].Cost != 3 || sum.Events[12].Line != 16 {
		t.Errorf("Summary.Events[12] = %+v, want bob's cost 3 on line 16 (of 13 events: %d)", sum.Events[len(sum.Events)-1], len(sum.Events))
	}
	var b strings.Builder
	if err := sum.Print(&b); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"fixed_window 3/s, trace trace.csv", "13 requests, 8 admitted, 5 rejected", "10         6         4  alice"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("Summary.Print = %q, want it to contain %q", b.String(), s)
		}
	}
}

func TestRunErrorsNameTheLine(t *testing.T) {
	// Lines before the bad one are decided and written; the error names
	// the line.
	out, sum, err := runTrace(t, sluice.TokenBucket, sluice.PerSecond(3), "# ok\n1,a\n2,a\n1.5,a\n3,a\n")
	var le *sim.LineError
	if !errors.As(err, &le) || le.File != "trace.csv" || le.Line != 4 {
		t.Fatalf("Run error = %v, want a *LineError for trace.csv line 4", err)
	}
	if want := "trace.csv:4: time 1.500000 goes backwards (the previous request was at 2.000000)"; err.Error() != want {
		t.Errorf("Run error = %q, want %q", err, want)
	}
	if n := strings.Count(out, "\n"); n != 3 || sum.Requests != 2 {
		t.Errorf("Run wrote %d lines and counted %d requests before the error, want 3 (header + 2) and 2", n, sum.Requests)
	}
}

func TestRunRejectsBadOptions(t *testing.T) {
	store := memstore.New(memstore.Options{})
	for _, c := range []struct {
		name string
		opt  sim.Options
		want error
	}{
		{"no algorithm", sim.Options{Limit: sluice.PerSecond(1), Store: store}, sluice.ErrUnknownAlgorithm},
		{"bad limit", sim.Options{Algorithm: sluice.GCRA, Limit: sluice.Limit{Rate: 0, Period: time.Second}, Store: store}, sluice.ErrInvalidLimit},
	} {
		_, err := sim.Run(context.Background(), c.opt, strings.NewReader("1,a\n"), "t", &bytes.Buffer{})
		if !errors.Is(err, c.want) {
			t.Errorf("%s: Run error = %v, want %v", c.name, err, c.want)
		}
	}
	if _, err := sim.Run(context.Background(), sim.Options{Algorithm: sluice.GCRA, Limit: sluice.PerSecond(1)}, strings.NewReader(""), "t", &bytes.Buffer{}); err == nil {
		t.Error("Run without a store: no error")
	}
}

func TestRunCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	opt := sim.Options{Algorithm: sluice.GCRA, Limit: sluice.PerSecond(1), Store: memstore.New(memstore.Options{})}
	_, err := sim.Run(ctx, opt, strings.NewReader("1,a\n"), "t", &bytes.Buffer{})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Run with a cancelled context: error = %v, want context.Canceled", err)
	}
}

// TestRunStoreError runs a trace on a Redis store whose server is gone:
// Run must stop on the first request and name its line.
func TestRunStoreError(t *testing.T) {
	srv := redistest.StartServer(t)
	// The timeout is generous: connecting to the live server must not
	// fail on a loaded machine (the 50ms default once did, in CI-like runs).
	store, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	srv.Stop()
	opt := sim.Options{Algorithm: sluice.GCRA, Limit: sluice.PerSecond(1), Store: store}
	_, err = sim.Run(context.Background(), opt, strings.NewReader("# c\n1,a\n"), "t.csv", &bytes.Buffer{})
	if !errors.Is(err, sluice.ErrStoreUnavailable) || !strings.Contains(err.Error(), `t.csv:2: take "a"`) {
		t.Errorf("Run on a stopped Redis: error = %v, want ErrStoreUnavailable naming t.csv:2", err)
	}
}

func ExampleRun() {
	trace := strings.NewReader(`# t,key[,cost]
10.0,alice
10.1,alice
10.2,alice
11.0,alice
`)
	opt := sim.Options{Algorithm: sluice.FixedWindow, Limit: sluice.PerSecond(2), Store: memstore.New(memstore.Options{})}
	sum, err := sim.Run(context.Background(), opt, trace, "example", os.Stdout)
	if err != nil {
		panic(err)
	}
	sum.Print(os.Stdout)
	// Output:
	// t,key,cost,allowed,remaining,retry_after,delay
	// 10.000000,alice,1,1,1,0.000000,0.000000
	// 10.100000,alice,1,1,0,0.000000,0.000000
	// 10.200000,alice,1,0,0,0.800000,0.000000
	// 11.000000,alice,1,1,1,0.000000,0.000000
	// fixed_window 2/s, trace example
	// 4 requests, 3 admitted, 1 rejected
	//
	//   requests  admitted  rejected  key
	//          4         3         1  alice
}
