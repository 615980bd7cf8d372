package sim_test

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/sim"
)

func TestParseTime(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"12", 12_000_000},
		{"12.000250", 12_000_250},
		{"12.5", 12_500_000},
		{"0.000001", 1},
		{"007.1", 7_100_000},
		{"1732000000.123456", 1_732_000_000_123_456},
		{"12.0002500000", 12_000_250},  // zeros past the sixth decimal are exact
		{"4503599627.370496", 1 << 52}, // sluice.MaxTime
	} {
		got, err := sim.ParseTime(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseTime(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
		if c.in != "12.0002500000" && c.in != "007.1" && c.in != "12" && c.in != "0" && c.in != "12.5" {
			if s := sim.FormatTime(got); s != c.in {
				t.Errorf("FormatTime(%d) = %q, want %q", got, s, c.in)
			}
		}
	}
	for _, c := range []struct{ in, want string }{
		{"", "not seconds as a decimal"},
		{"-1", "negative"},
		{"-0.5", "negative"},
		{"+1", "not seconds"},
		{"1e9", "not seconds"},
		{".5", "not seconds"},
		{"5.", "not seconds"},
		{"1.2.3", "not seconds"},
		{"0x10", "not seconds"},
		{"12.0000001", "more than 6 decimals"},
		{"12.1234567", "more than 6 decimals"},
		{"4503599627.370497", "after 2112-09-17"},
		{"253402300800", "after 2112-09-17"},
		{"99999999999999999999999", "after 2112-09-17"},
		{"NaN", "not seconds"},
		{"1 2", "not seconds"},
	} {
		got, err := sim.ParseTime(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseTime(%q) = %d, %v; want an error saying %q", c.in, got, err, c.want)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	for _, c := range []struct {
		in   time.Duration
		want string
	}{
		{0, "0.000000"},
		{time.Microsecond, "0.000001"},
		{1500 * time.Millisecond, "1.500000"},
		{time.Hour, "3600.000000"},
		{-1, "-1"}, // sluice.Never
		{1999 * time.Nanosecond, "0.000001"},
	} {
		if got := sim.FormatDuration(c.in); got != c.want {
			t.Errorf("FormatDuration(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}

func readAll(t *testing.T, trace string) ([]sim.Request, error) {
	t.Helper()
	r := sim.NewReader(strings.NewReader(trace), "trace.csv")
	var reqs []sim.Request
	for {
		req, err := r.Read()
		if err == io.EOF {
			return reqs, nil
		}
		if err != nil {
			if _, again := r.Read(); again != err {
				t.Errorf("Read after error %v = %v, want the same error", err, again)
			}
			return reqs, err
		}
		reqs = append(reqs, req)
	}
}

func TestReader(t *testing.T) {
	trace := "\uFEFFt, key, cost   # a header\n" +
		"# a comment line\n" +
		"\n" +
		"   \t\n" +
		"1.5,alice\n" +
		"  2 ,\tbob , 3  # trailing comment, cost 3\r\n" +
		"2,bob,0\n" +
		"2.000001,carol # no cost: 1\n" +
		"3,clé ü,007\n" +
		"4,a b\n" // spaces inside a key are kept
	got, err := readAll(t, trace)
	if err != nil {
		t.Fatal(err)
	}
	want := []sim.Request{
		{Line: 5, Micros: 1_500_000, Key: "alice", Cost: 1},
		{Line: 6, Micros: 2_000_000, Key: "bob", Cost: 3},
		{Line: 7, Micros: 2_000_000, Key: "bob", Cost: 0},
		{Line: 8, Micros: 2_000_001, Key: "carol", Cost: 1},
		{Line: 9, Micros: 3_000_000, Key: "clé ü", Cost: 7},
		{Line: 10, Micros: 4_000_000, Key: "a b", Cost: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("read %d requests %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestReaderErrors(t *testing.T) {
	long := strings.Repeat("k", sim.MaxKeyBytes+1)
	for _, c := range []struct {
		name  string
		trace string
		line  int
		msg   string
	}{
		{"one field", "1,a\n2\n", 2, "want t,key[,cost], got 1 fields"},
		{"four fields", "1,a,1,1\n", 1, "got 4 fields"},
		{"bad time", "# c\nabc,a\n", 2, `time "abc" is not seconds as a decimal`},
		{"negative time", "-1,a\n", 1, `time "-1" is negative`},
		{"too precise", "\n1.0000001,a\n", 2, "more than 6 decimals"},
		{"backwards", "1,a\n2,a\n1.999999,b\n", 3, "time 1.999999 goes backwards (the previous request was at 2.000000)"},
		{"backwards after comments", "5,a\n# x\n\n4,a\n", 4, "goes backwards"},
		{"empty key", "1, \n", 1, "empty key"},
		{"key too long", "1," + long + "\n", 1, "longer than 1024"},
		{"control char in key", "1,a\x01b\n", 1, "control character"},
		{"invalid UTF-8 key", "1,a\xffb\n", 1, "not valid UTF-8"},
		{"negative cost", "1,a,-1\n", 1, `cost "-1" is not a whole number`},
		{"fractional cost", "1,a,1.5\n", 1, `cost "1.5" is not a whole number`},
		{"comma in key", "1,user,42\n1,GET /a,b\n", 2, `cost "b" is not a whole number ≥ 0 (a key cannot hold a ",")`},
		{"commas in key", "1,a,b,c\n", 1, `got 4 fields in "1,a,b,c" (a key cannot hold a ",")`},
		{"empty cost", "1,a,\n", 1, "empty cost"},
		{"huge cost", "1,a,99999999999999999999\n", 1, "larger than"},
		{"cost over 2^53", "1,a,9007199254740993\n", 1, "larger than 9007199254740992"},
		{"header later", "1,a\nt,key\n", 2, `time "t"`},
		{"line too long", "1,a\n" + strings.Repeat("x", sim.MaxLineBytes+10) + "\n", 2, "line longer than"},
	} {
		_, err := readAll(t, c.trace)
		var le *sim.LineError
		if !errors.As(err, &le) {
			t.Errorf("%s: error = %v, want a *LineError", c.name, err)
			continue
		}
		if le.File != "trace.csv" || le.Line != c.line || !strings.Contains(le.Msg, c.msg) {
			t.Errorf("%s: error = %q (line %d), want trace.csv line %d saying %q", c.name, err, le.Line, c.line, c.msg)
		}
		if !strings.HasPrefix(err.Error(), "trace.csv:") {
			t.Errorf("%s: error %q does not start with the file and line", c.name, err)
		}
	}
}

// TestReaderLineBound: a line of MaxLineBytes (its end of line, \n or
// \r\n, apart) is read, with or without a newline after it; one byte more is
// refused, naming its line.
func TestReaderLineBound(t *testing.T) {
	line := func(n int) string { // a request padded by a comment to n bytes
		return "1,a #" + strings.Repeat("x", n-len("1,a #"))
	}
	for _, c := range []struct {
		name, trace string
		ok          bool
	}{
		{"max, LF", "0,a\n" + line(sim.MaxLineBytes) + "\n2,b\n", true},
		{"max, CRLF", "0,a\r\n" + line(sim.MaxLineBytes) + "\r\n2,b\r\n", true},
		{"max, last line without newline", "0,a\n" + line(sim.MaxLineBytes), true},
		{"max+1, LF", "0,a\n" + line(sim.MaxLineBytes+1) + "\n2,b\n", false},
		{"max+1, CRLF", "0,a\r\n" + line(sim.MaxLineBytes+1) + "\r\n2,b\r\n", false},
		{"max+1, last line without newline", "0,a\n" + line(sim.MaxLineBytes+1), false},
		{"max+2, LF", "0,a\n" + line(sim.MaxLineBytes+2) + "\n2,b\n", false},
	} {
		reqs, err := readAll(t, c.trace)
		if c.ok {
			if err != nil || len(reqs) < 2 || reqs[1].Key != "a" || reqs[1].Line != 2 {
				t.Errorf("%s: read %+v, %v; want the line of %d bytes read as line 2", c.name, reqs, err, sim.MaxLineBytes)
			}
			continue
		}
		var le *sim.LineError
		if !errors.As(err, &le) || le.Line != 2 || !strings.Contains(le.Msg, fmt.Sprintf("longer than %d bytes", sim.MaxLineBytes)) {
			t.Errorf("%s: error %v, want line 2 refused as longer than %d bytes", c.name, err, sim.MaxLineBytes)
		}
	}
}

// FuzzParseTrace feeds arbitrary text to the trace reader. Whatever it
// accepts must be well formed (times in order, keys and costs in bounds)
// and print back to a trace that reads the same; whatever it refuses must
// be a *LineError naming a line of the input.
func FuzzParseTrace(f *testing.F) {
	for _, s := range []string{
		"0,a\n",
		"t,key,cost\n12.000250,alice,2 # c\n\n13,bob\n",
		"\uFEFF1.5 , a b ,0\r\n",
		"2,a\n1,a\n",
		"1.0000001,a\n",
		"-1,a\n",
		"1,,1\n",
		"1,a,-1\n",
		"253402300799.999999,z,9007199254740992\n",
		"# only a comment",
		"1,a\x00\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := sim.NewReader(strings.NewReader(string(data)), "fuzz")
		lines := strings.Count(string(data), "\n") + 1
		var reqs []sim.Request
		var last int64
		for {
			req, err := r.Read()
			if err == io.EOF {
				break
			}
			if err != nil {
				var le *sim.LineError
				if !errors.As(err, &le) || le.File != "fuzz" || le.Line < 1 || le.Line > lines {
					t.Fatalf("Read error %v is not a *LineError within the %d lines", err, lines)
				}
				break
			}
			if req.Micros < last || req.Micros < 0 || req.Cost < 0 || req.Cost > sim.MaxCost ||
				req.Key == "" || len(req.Key) > sim.MaxKeyBytes || strings.ContainsAny(req.Key, ",#\n") ||
				req.Line < 1 || req.Line > lines {
				t.Fatalf("Read accepted a bad request %+v (previous time %d)", req, last)
			}
			last = req.Micros
			reqs = append(reqs, req)
		}
		// What was read prints back to a trace that reads the same.
		var b strings.Builder
		for _, q := range reqs {
			b.WriteString(sim.FormatTime(q.Micros) + "," + q.Key + "," + strconv.FormatInt(q.Cost, 10) + "\n")
		}
		again := sim.NewReader(strings.NewReader(b.String()), "again")
		for i, q := range reqs {
			got, err := again.Read()
			if err != nil || got.Micros != q.Micros || got.Key != q.Key || got.Cost != q.Cost {
				t.Fatalf("request %d %+v printed and read again = %+v, %v", i, q, got, err)
			}
		}
	})
}
