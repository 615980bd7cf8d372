package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/sim"
)

// simulateCmd runs `sluice simulate args…` with stdin and returns the exit
// code, stdout and stderr.
func simulateCmd(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), append([]string{"simulate"}, args...), strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

const simTrace = `# t,key[,cost]
10.0,alice
10.1,alice
10.2,alice
10.2,bob,2
11.0,alice
`

func TestSimulateStdin(t *testing.T) {
	code, out, errOut := simulateCmd(t, simTrace, "-algorithm", "fixed_window", "-rate", "2/s")
	if code != 0 {
		t.Fatalf("sluice simulate: exit %d, stderr %s", code, errOut)
	}
	want := `t,key,cost,allowed,remaining,retry_after,delay
10.000000,alice,1,1,1,0.000000,0.000000
10.100000,alice,1,1,0,0.000000,0.000000
10.200000,alice,1,0,0,0.800000,0.000000
10.200000,bob,2,1,0,0.000000,0.000000
11.000000,alice,1,1,1,0.000000,0.000000
`
	if out != want {
		t.Errorf("sluice simulate stdout:\n%s\nwant:\n%s", out, want)
	}
	for _, s := range []string{"fixed_window 2/s, trace stdin", "5 requests, 4 admitted, 1 rejected", "4         3         1  alice", "1         1         0  bob"} {
		if !strings.Contains(errOut, s) {
			t.Errorf("sluice simulate stderr = %q, want it to contain %q", errOut, s)
		}
	}
}

// TestSimulateTraceDash: -trace - reads standard input, as no -trace does,
// and the summary names it so.
func TestSimulateTraceDash(t *testing.T) {
	_, absent, _ := simulateCmd(t, simTrace, "-algorithm", "gcra", "-rate", "2/s")
	code, out, errOut := simulateCmd(t, simTrace, "-algorithm", "gcra", "-rate", "2/s", "-trace", "-")
	if code != 0 || out != absent || strings.Count(out, "\n") != 6 {
		t.Errorf("sluice simulate -trace -: exit %d, stdout %q; want exit 0 and what no -trace prints, %q", code, out, absent)
	}
	if !strings.Contains(errOut, "trace stdin") {
		t.Errorf("sluice simulate -trace - stderr = %q, want it to name stdin", errOut)
	}
}

func TestSimulateTraceFileAndPlot(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace.csv")
	if err := os.WriteFile(trace, []byte(simTrace), 0o644); err != nil {
		t.Fatal(err)
	}
	svg := filepath.Join(dir, "out.svg")
	code, out, errOut := simulateCmd(t, "ignored", "-algorithm", "leaky_bucket", "-rate", "2/s", "-burst", "3", "-trace", trace, "-plot", svg)
	if code != 0 {
		t.Fatalf("sluice simulate -trace -plot: exit %d, stderr %s", code, errOut)
	}
	if !strings.HasPrefix(out, "t,key,cost,allowed,remaining,retry_after,delay\n10.000000,alice,1,1,") || strings.Count(out, "\n") != 6 {
		t.Errorf("sluice simulate -trace stdout = %q, want the header and 5 lines", out)
	}
	if !strings.Contains(errOut, "leaky_bucket 2/s burst 3, trace "+trace) || !strings.Contains(errOut, "longest delay 0.800000s") {
		t.Errorf("sluice simulate stderr = %q, want the algorithm, the trace file and the longest delay", errOut)
	}
	doc, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(doc))
	for {
		_, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("-plot wrote malformed XML: %v", err)
		}
	}
	for _, s := range []string{"<svg", "leaky_bucket 2/s burst 3", "admitted (5)", "delay until it leaves"} {
		if !bytes.Contains(doc, []byte(s)) {
			t.Errorf("-plot file does not contain %q", s)
		}
	}
}

func TestSimulateErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.csv")
	for _, c := range []struct {
		name  string
		stdin string
		args  []string
		code  int
		msg   string
	}{
		{"unknown flag", "", []string{"-rate", "1/s", "-speed", "9"}, 2, "flag provided but not defined: -speed"},
		{"malformed -burst", "", []string{"-rate", "1/s", "-burst", "ten"}, 2, `invalid value "ten" for flag -burst`},
		{"stray argument", "", []string{"-rate", "1/s", "trace.csv"}, 2, `unexpected argument "trace.csv"`},
		{"unknown algorithm", "", []string{"-algorithm", "bucket", "-rate", "1/s"}, 1, `-algorithm: sluice: unknown algorithm: "bucket"`},
		{"no rate", "", []string{"-algorithm", "gcra"}, 1, "-rate is required"},
		{"bad rate", "", []string{"-rate", "5/x"}, 1, `-rate: sluice: invalid limit: "5/x"`},
		{"negative burst", "", []string{"-rate", "5/s", "-burst", "-1"}, 1, "-burst -1: must not be negative"},
		// A window admits its rate each period: a -burst there used to be
		// ignored without a word.
		{"burst on fixed_window", "", []string{"-algorithm", "fixed_window", "-rate", "5/s", "-burst", "10"}, 1,
			"-burst 10: applies to token_bucket, gcra and leaky_bucket only: fixed_window admits the rate, 5, each period"},
		{"burst on sliding_window_log", "", []string{"-algorithm", "sliding_window_log", "-rate", "5/s", "-burst", "12"}, 1,
			"-burst 12: applies to token_bucket, gcra and leaky_bucket only: sliding_window_log admits the rate, 5, each period"},
		{"burst on sliding_window_counter", "", []string{"-algorithm", "sliding_window_counter", "-rate", "5/s", "-burst", "1"}, 1,
			"-burst 1: applies to token_bucket, gcra and leaky_bucket only: sliding_window_counter admits the rate, 5, each period"},
		{"uneven segments", "", []string{"-algorithm", "sliding_window_counter", "-rate", "5/s", "-segments", "7"}, 1, "does not split into 7 equal sub-windows"},
		{"unknown store", "", []string{"-rate", "5/s", "-store", "disk"}, 1, `-store "disk": want memory or redis`},
		{"plot not svg", "", []string{"-rate", "5/s", "-plot", "out.png"}, 1, "-plot out.png: the plot is SVG"},
		{"missing trace", "", []string{"-rate", "5/s", "-trace", missing}, 1, "-trace: open " + missing},
		{"bad line", "1,a\n\n1,a,x\n", []string{"-rate", "5/s"}, 1, `sluice simulate: stdin:3: cost "x" is not a whole number`},
		{"time backwards", "2,a\n1,a\n", []string{"-rate", "5/s"}, 1, "stdin:2: time 1.000000 goes backwards"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, errOut := simulateCmd(t, c.stdin, c.args...)
			if code != c.code || !strings.Contains(errOut, c.msg) {
				t.Errorf("sluice simulate %s: exit %d, stderr %q; want exit %d and %q", strings.Join(c.args, " "), code, errOut, c.code, c.msg)
			}
		})
	}
}

// TestSimulateIgnoredFlags: as the docs say, -segments is for
// sliding_window_counter; the other algorithms ignore it, whatever its
// value, so that one command line can be run through every algorithm. A
// -burst equal to the rate (the default, spelled out) is accepted by every
// algorithm.
func TestSimulateIgnoredFlags(t *testing.T) {
	for _, c := range []struct {
		alg  string
		flag []string
	}{
		{"token_bucket", []string{"-segments", "7"}},
		{"leaky_bucket", []string{"-segments", "1025"}},
		{"gcra", []string{"-segments", "3"}},
		{"fixed_window", []string{"-burst", "5"}},
		{"sliding_window_log", []string{"-burst", "5", "-segments", "7"}},
		{"sliding_window_counter", []string{"-burst", "5"}},
	} {
		args := []string{"-algorithm", c.alg, "-rate", "5/s"}
		code, want, errOut := simulateCmd(t, simTrace, args...)
		if code != 0 {
			t.Fatalf("sluice simulate %v: exit %d: %s", args, code, errOut)
		}
		args = append(args, c.flag...)
		code, got, errOut := simulateCmd(t, simTrace, args...)
		if code != 0 || got != want {
			t.Errorf("sluice simulate %v: exit %d, stderr %q, stdout\n%s\nwant exit 0 and the output without %v:\n%s", args, code, errOut, got, c.flag, want)
		}
	}
}

// TestSimulatePlotFile: a -plot file that cannot be written is refused
// before the run (not after replaying a long trace), and a failed run
// leaves the old plot as it was and no file beside it.
func TestSimulatePlotFile(t *testing.T) {
	dir := t.TempDir()
	nowhere := filepath.Join(dir, "missing", "out.svg")
	code, out, errOut := simulateCmd(t, simTrace, "-rate", "2/s", "-plot", nowhere)
	if code != 1 || out != "" || !strings.Contains(errOut, "-plot") {
		t.Errorf("sluice simulate -plot %s: exit %d, stdout %q, stderr %q; want exit 1 before any decision, naming -plot", nowhere, code, out, errOut)
	}

	svg := filepath.Join(dir, "out.svg")
	if err := os.WriteFile(svg, []byte("old plot"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := simulateCmd(t, simTrace+"1,late\n", "-rate", "2/s", "-plot", svg); code != 1 {
		t.Fatalf("a run with a bad line: exit %d (%s), want 1", code, errOut)
	}
	if b, err := os.ReadFile(svg); err != nil || string(b) != "old plot" {
		t.Errorf("after a failed run, %s holds %q (%v), want the old plot", svg, b, err)
	}
	if code, _, errOut := simulateCmd(t, simTrace, "-rate", "2/s", "-plot", svg); code != 0 {
		t.Fatalf("sluice simulate -plot: exit %d: %s", code, errOut)
	}
	if b, err := os.ReadFile(svg); err != nil || !bytes.HasPrefix(b, []byte("<svg")) && !bytes.HasPrefix(b, []byte("<?xml")) {
		t.Errorf("after a run, %s holds %.40q… (%v), want the new plot", svg, b, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "out.svg" {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("the plot's directory holds %v, want out.svg alone", names)
	}
}

func TestSimulateHelp(t *testing.T) {
	code, _, errOut := simulateCmd(t, "", "-h")
	if code != 0 || !strings.Contains(errOut, "usage: sluice simulate") || !strings.Contains(errOut, "-algorithm NAME") {
		t.Errorf("sluice simulate -h: exit %d, stderr %q; want 0 and the usage", code, errOut)
	}
}

// TestSimulateRedisMatchesMemory runs the same traces through -store
// memory and -store redis (a real redis-server): the output must be the
// same bytes, for every algorithm, and a second run on the same Redis must
// not see the first one's counters.
func TestSimulateRedisMatchesMemory(t *testing.T) {
	srv := redistest.StartServer(t)
	traces := []string{"../../examples/burst.csv", "../../internal/sim/testdata/mixed.csv", "../../internal/sim/testdata/spec_example.csv"}
	for _, alg := range sluice.Algorithms() {
		for _, trace := range traces {
			args := withoutWindowBurst(alg, []string{"-algorithm", alg.String(), "-rate", "5/s", "-burst", "7", "-trace", trace})
			if alg == sluice.SlidingWindowCounter {
				args = append(args, "-segments", "4")
			}
			code, mem, errOut := simulateCmd(t, "", append(args, "-store", "memory")...)
			if code != 0 {
				t.Fatalf("%v -store memory: exit %d: %s", args, code, errOut)
			}
			for run := 1; run <= 2; run++ {
				code, red, errOut := simulateCmd(t, "", append(args, "-store", "redis", "-redis", srv.Addr)...)
				if code != 0 {
					t.Fatalf("%v -store redis: exit %d: %s", args, code, errOut)
				}
				if red != mem {
					t.Errorf("%v: -store redis (run %d) printed\n%s\n-store memory printed\n%s", args, run, red, mem)
				}
			}
		}
	}
}

// adversarialTrace is a trace meant to find where the Redis scripts and
// the Go algorithms part: costs of 0, over the burst and of 2^53; many
// requests at one instant and at window boundaries; gaps of a microsecond,
// a day and years; 300 keys; the last instant a store decides at. Its
// randomness has a fixed seed.
func adversarialTrace() string {
	rng := rand.New(rand.NewPCG(10, 27))
	var b strings.Builder
	us := int64(1_000_000)
	costs := []string{"", ",1", ",2", ",0", ",3", ",7", ",8", ",50", ",9007199254740992"}
	for i := range 1500 {
		switch r := rng.IntN(100); {
		case r < 30: // same instant
		case r < 33:
			us += 1
		case r < 36:
			us = (us/60_000_000 + 1) * 60_000_000 // a minute boundary
		case r < 38:
			us += 86_400_000_000
		case r < 39:
			us += 3 * 365 * 86_400_000_000
		default:
			us += rng.Int64N(400_000)
		}
		key := "k" + strconv.Itoa(rng.IntN(4))
		if i%3 == 0 {
			key = "many-" + strconv.Itoa(rng.IntN(300))
		}
		cost := costs[rng.IntN(3)] // mostly 1 and 2
		if rng.IntN(5) == 0 {
			cost = costs[rng.IntN(len(costs))]
		}
		fmt.Fprintf(&b, "%s,%s%s\n", sim.FormatTime(us), key, cost)
	}
	for _, c := range costs {
		fmt.Fprintf(&b, "4503599627.370496,last%s\n", c)
	}
	return b.String()
}

// TestSimulateRedisMatchesMemoryAdversarial: -store redis prints what
// -store memory prints, byte for byte, for every algorithm and several
// limits, on adversarialTrace.
func TestSimulateRedisMatchesMemoryAdversarial(t *testing.T) {
	srv := redistest.StartServer(t)
	trace := adversarialTrace()
	for _, alg := range sluice.Algorithms() {
		for _, limit := range [][]string{
			{"-rate", "5/s", "-burst", "7"},
			{"-rate", "3/250ms", "-burst", "1"},
			{"-rate", "10/m", "-burst", "25", "-segments", "4"},
			{"-rate", "2/7d"},
		} {
			args := withoutWindowBurst(alg, append([]string{"-algorithm", alg.String()}, limit...))
			code, mem, errOut := simulateCmd(t, trace, append(args, "-store", "memory")...)
			if code != 0 {
				t.Fatalf("%v -store memory: exit %d: %s", args, code, errOut)
			}
			if strings.Count(mem, "\n") != 1+1500+9 {
				t.Fatalf("%v -store memory printed %d lines, want the header and 1509", args, strings.Count(mem, "\n"))
			}
			code, red, errOut := simulateCmd(t, trace, append(args, "-store", "redis", "-redis", srv.Addr)...)
			if code != 0 {
				t.Fatalf("%v -store redis: exit %d: %s", args, code, errOut)
			}
			if red != mem {
				rl, ml := strings.Split(red, "\n"), strings.Split(mem, "\n")
				for i := range min(len(rl), len(ml)) {
					if rl[i] != ml[i] {
						t.Errorf("%v: line %d: -store redis printed %q, -store memory %q", args, i+1, rl[i], ml[i])
						break
					}
				}
			}
		}
	}
}

// TestSimulateRedisLeavesNoKeys: a run on -store redis deletes the keys it
// made when it ends, also when a bad line stops it; with a weekly limit
// they would otherwise stay in Redis for weeks.
func TestSimulateRedisLeavesNoKeys(t *testing.T) {
	srv := redistest.StartServer(t)
	trace := "1,a\n2,b,3\n3,c\n4,\"q}\\\"\n100000,a,0\n"
	for _, alg := range sluice.Algorithms() {
		for _, tc := range []struct {
			trace string
			code  int
		}{{trace, 0}, {trace + "99,late\n", 1}} {
			code, _, errOut := simulateCmd(t, tc.trace, "-algorithm", alg.String(), "-rate", "5/7d", "-store", "redis", "-redis", srv.Addr)
			if code != tc.code {
				t.Fatalf("%s -store redis: exit %d, want %d: %s", alg, code, tc.code, errOut)
			}
			if n, err := redistest.Do(srv.Addr, "DBSIZE"); err != nil || n != "0" {
				keys, _ := redistest.Do(srv.Addr, "KEYS", "*")
				t.Fatalf("%s -store redis (exit %d): DBSIZE %q (%v) after the run, want 0; keys: %s", alg, code, n, err, keys)
			}
		}
	}
}

func TestSimulateRedisDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	code, out, errOut := simulateCmd(t, "1,a\n", "-rate", "5/s", "-store", "redis", "-redis", addr)
	if code != 1 || out != "" || !strings.Contains(errOut, "sluice simulate: -store redis: redisstore: connect") {
		t.Errorf("sluice simulate -store redis -redis %s (closed): exit %d, stdout %q, stderr %q; want exit 1 naming the store", addr, code, out, errOut)
	}
}

// TestSimulateExamples reruns every command of examples/regenerate.sh and
// checks that the committed plots are what they print, so the pictures in
// the documentation always show what the code does.
func TestSimulateExamples(t *testing.T) {
	script, err := os.ReadFile("../../examples/regenerate.sh")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for line := range strings.Lines(string(script)) {
		args, ok := strings.CutPrefix(strings.TrimSpace(line), "sim -")
		if !ok {
			continue
		}
		n++
		f := strings.Fields("-" + args)
		for i := range f {
			if strings.HasPrefix(f[i], "examples/") {
				f[i] = "../../" + f[i]
			}
		}
		want, err := os.ReadFile(f[len(f)-1])
		if err != nil {
			t.Fatal(err)
		}
		f[len(f)-1] = filepath.Join(t.TempDir(), "plot.svg")
		if code, _, errOut := simulateCmd(t, "", f...); code != 0 {
			t.Fatalf("sluice simulate %s: exit %d: %s", args, code, errOut)
		}
		got, err := os.ReadFile(f[len(f)-1])
		if err != nil {
			t.Fatal(err)
		}
		// The plot names the trace as given: examples/… in the script.
		got = bytes.ReplaceAll(got, []byte("../../examples/"), []byte("examples/"))
		if !bytes.Equal(got, want) {
			t.Errorf("sluice simulate -%s: the plot differs from the committed one; run examples/regenerate.sh", args)
		}
	}
	if n < 3 {
		t.Errorf("found %d commands in examples/regenerate.sh, want at least 3", n)
	}
}

// withoutWindowBurst returns args without their -burst N when alg is a
// window, which refuses a burst other than the rate.
func withoutWindowBurst(alg sluice.Algorithm, args []string) []string {
	if alg != sluice.FixedWindow && alg != sluice.SlidingWindowLog && alg != sluice.SlidingWindowCounter {
		return args
	}
	var out []string
	for i := 0; i < len(args); i++ {
		if args[i] == "-burst" {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}
