package sim_test

import (
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/sim"
)

// svgText parses doc as XML and returns its character data, joined by
// newlines, failing the test if doc is not well formed or not an <svg>.
func svgText(t *testing.T, doc string) string {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(doc))
	var text []string
	root := ""
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("plot is not well-formed XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = tok.Name.Local
				if tok.Name.Space != "http://www.w3.org/2000/svg" {
					t.Errorf("root namespace = %q, want the SVG namespace", tok.Name.Space)
				}
			}
		case xml.CharData:
			if s := strings.TrimSpace(string(tok)); s != "" {
				text = append(text, s)
			}
		}
	}
	if root != "svg" {
		t.Fatalf("root element = %q, want svg", root)
	}
	return strings.Join(text, "\n")
}

func plot(t *testing.T, sum *sim.Summary) string {
	t.Helper()
	var b strings.Builder
	if err := sim.Plot(&b, sum); err != nil {
		t.Fatalf("Plot: %v", err)
	}
	return b.String()
}

func TestPlot(t *testing.T) {
	in, err := os.ReadFile("testdata/mixed.csv")
	if err != nil {
		t.Fatal(err)
	}
	for _, alg := range sluice.Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			_, sum, err := runTrace(t, alg, sluice.PerSecond(3), string(in))
			if err != nil {
				t.Fatal(err)
			}
			doc := plot(t, sum)
			text := svgText(t, doc)
			want := []string{
				"sluice simulate · " + sim.Describe(alg, sluice.PerSecond(3)),
				fmt.Sprintf("admitted (%d)", sum.Admitted),
				fmt.Sprintf("rejected (%d)", sum.Rejected),
				"limit: ",
				"in use",
				"alice", "bob",
				"trace trace.csv · 13 requests from 2 keys",
				"time (seconds since the Unix epoch)",
			}
			if alg == sluice.LeakyBucket {
				want = append(want, "delay until it leaves (max ")
			}
			if alg == sluice.FixedWindow || alg == sluice.SlidingWindowCounter {
				want = append(want, "window boundary")
			}
			for _, w := range want {
				if !strings.Contains(text, w) {
					t.Errorf("plot text does not contain %q:\n%s", w, text)
				}
			}
			// One mark per request here: dots for admitted, crosses for rejected
			// (no two of these requests fall on the same pixel and level).
			if got := strings.Count(doc, "<circle"); got != int(sum.Admitted)+1 { // +1: the legend
				t.Errorf("plot has %d dots, want %d admitted + 1 in the legend", got, sum.Admitted)
			}
			if again := plot(t, sum); again != doc {
				t.Error("Plot is not deterministic: two calls differ")
			}
		})
	}
}

func TestPlotEscapesAndGroupsKeys(t *testing.T) {
	var trace strings.Builder
	keys := []string{`<script>&"'`, "k1", "k2", "k3", "k4", "k5", "k6", "k7"}
	for j := range len(keys) + 1 {
		for i, k := range keys {
			if j <= len(keys)-i { // the first keys are the busiest
				fmt.Fprintf(&trace, "%d.%06d,%s\n", j, i, k)
			}
		}
	}
	_, sum, err := runTrace(t, sluice.GCRA, sluice.PerSecond(2), trace.String())
	if err != nil {
		t.Fatal(err)
	}
	text := svgText(t, plot(t, sum))
	for _, w := range []string{`<script>&"'`, "k1", "k4", "3 other keys"} {
		if !strings.Contains(text, w) {
			t.Errorf("plot text does not contain %q:\n%s", w, text)
		}
	}
	if strings.Contains(text, "k5") {
		t.Errorf("plot has a lane for k5, want it among the other keys:\n%s", text)
	}
}

func TestPlotEdgeCases(t *testing.T) {
	for _, c := range []struct{ name, trace, want string }{
		{"empty", "# nothing\n", "no requests in the trace"},
		{"one instant", "5,a\n5,a\n5,a\n5,a\n", "rejected (1)"},
		{"real time", "1763726400.5,a\n1763726460,a\n", "time (UTC) on 2025-11-21"},
		{"long key", "1," + strings.Repeat("é", 300) + "\n", strings.Repeat("é", 19) + "…"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, sum, err := runTrace(t, sluice.SlidingWindowLog, sluice.PerSecond(3), c.trace)
			if err != nil {
				t.Fatal(err)
			}
			if text := svgText(t, plot(t, sum)); !strings.Contains(text, c.want) {
				t.Errorf("plot text does not contain %q:\n%s", c.want, text)
			}
		})
	}
}

func TestPlotNeedsEvents(t *testing.T) {
	sum := &sim.Summary{Algorithm: sluice.GCRA, Limit: sluice.PerSecond(1), Requests: 1, Admitted: 1}
	if err := sim.Plot(io.Discard, sum); err == nil {
		t.Error("Plot of a run without Record: no error")
	}
}

// FuzzPlot replays arbitrary traces through every algorithm and plots
// them: whatever Run accepts must plot to well-formed SVG.
func FuzzPlot(f *testing.F) {
	f.Add([]byte("0,a\n0.5,b,3\n1,a\n"), uint8(0), uint8(3))
	f.Add([]byte("1763726400,<&>\n1763726400.000001,é,0\n"), uint8(1), uint8(1))
	f.Add([]byte("0,a\n99999,a,9007199254740992\n"), uint8(4), uint8(200))
	f.Fuzz(func(t *testing.T, data []byte, alg, rate uint8) {
		a := sluice.Algorithms()[int(alg)%len(sluice.Algorithms())]
		l := sluice.PerSecond(int64(rate%20) + 1).WithSegments(int(rate % 3))
		_, sum, err := runTrace(t, a, l, string(data))
		if err != nil {
			return
		}
		var b strings.Builder
		if err := sim.Plot(&b, sum); err != nil {
			t.Fatalf("Plot: %v", err)
		}
		d := xml.NewDecoder(strings.NewReader(b.String()))
		for {
			_, err := d.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("Plot wrote malformed XML: %v", err)
			}
		}
	})
}
