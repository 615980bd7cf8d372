package harness

import (
	"os"
	"testing"
	"time"
)

// rank is the nearest-rank quantile: the smallest value with at least a
// share q of the values at or below it, so always one of the values, and
// the maximum when fewer than 1/(1-q) values leave no rank above q.
func TestRank(t *testing.T) {
	seq := func(n int) []int64 { // 1, 2, …, n
		s := make([]int64, n)
		for i := range s {
			s[i] = int64(i + 1)
		}
		return s
	}
	for _, c := range []struct {
		n    int
		q    float64
		want time.Duration
	}{
		{0, 0.5, 0}, {0, 0.99, 0}, // no value: 0
		{1, 0.5, 1}, {1, 0.999, 1}, {1, 1, 1},
		{2, 0.5, 1}, {2, 0.51, 2},
		{10, 0.5, 5}, {10, 0.9, 9}, {10, 0.91, 10}, {10, 0.99, 10}, {10, 0.999, 10}, {10, 1, 10},
		{100, 0.5, 50}, {100, 0.99, 99}, {100, 0.999, 100},
		{999, 0.999, 999}, // fewer than 1,000 values: p99.9 is the maximum
		{1000, 0.99, 990}, {1000, 0.999, 999}, {1000, 1, 1000},
		{1001, 0.999, 1000},
		{200000, 0.5, 100000}, {200000, 0.99, 198000}, {200000, 0.999, 199800},
	} {
		if got := rank(seq(c.n), c.q); got != c.want {
			t.Errorf("rank(1..%d, %v) = %d, want %d", c.n, c.q, got, c.want)
		}
	}
	// q×n computed in floating point must not push a rank one place up
	// where q×n is a whole number.
	all := seq(100000)
	for n := 1; n <= len(all); n++ {
		for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
			p := int64(q*1000 + 0.5) // q in thousandths
			want := (p*int64(n) + 999) / 1000
			if got := rank(all[:n], q); int64(got) != max(want, 1) {
				t.Fatalf("rank(1..%d, %v) = %d, want %d", n, q, got, want)
			}
		}
	}
}

// The times are fields 14 and 15 counted after the command name, which may
// hold spaces and parentheses; the children's (16, 17) are not the
// process's; the unit is USER_HZ.
func TestParseStat(t *testing.T) {
	line := "4242 (we (ird) name) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 75 90000 80000 20 0 3 0 12345 1000000 500 18446744073709551615\n"
	user, sys, err := parseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if user != 2500*time.Millisecond || sys != 750*time.Millisecond {
		t.Fatalf("parseStat = %v user, %v system; want 2.5s, 750ms", user, sys)
	}
	for _, bad := range []string{"", "4242 no parentheses S 1 2 3", "4242 (x) S 1 2", "4242 (x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 x 75 0 0"} {
		if _, _, err := parseStat([]byte(bad)); err == nil {
			t.Errorf("parseStat(%q): no error", bad)
		}
	}
}

// CPUTime agrees with getrusage on this process: the same kernel count, so
// the unit (USER_HZ) is right, to a tick or two of rounding.
func TestCPUTimeIsRusage(t *testing.T) {
	for start := SelfCPU(); SelfCPU()-start < 300*time.Millisecond; {
		for range 100000 {
		}
	}
	before := SelfCPU()
	got, err := CPUTime(os.Getpid())
	after := SelfCPU()
	if err != nil {
		t.Fatal(err)
	}
	if got < before-30*time.Millisecond || got > after+30*time.Millisecond {
		t.Fatalf("CPUTime(self) = %v, getrusage %v…%v", got, before, after)
	}
}

func TestParseSchedstat(t *testing.T) {
	if got, err := parseSchedstat([]byte("123456789 98765 4321\n")); err != nil || got != 98765 {
		t.Fatalf("parseSchedstat = %v, %v; want 98.765µs", got, err)
	}
	for _, bad := range []string{"", "123\n", "123 x 4\n"} {
		if _, err := parseSchedstat([]byte(bad)); err == nil {
			t.Errorf("parseSchedstat(%q): no error", bad)
		}
	}
}

func TestParsePressure(t *testing.T) {
	b := "some avg10=1.50 avg60=0.80 avg300=0.20 total=123456789\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=555\n"
	if got := parsePressure([]byte(b)); got != 123456789*time.Microsecond {
		t.Fatalf("parsePressure = %v, want the some line's total, 2m3.456789s", got)
	}
	for _, bad := range []string{"", "full avg10=0 total=5\n", "some avg10=0.00 total=x\n"} {
		if got := parsePressure([]byte(bad)); got != -1 {
			t.Errorf("parsePressure(%q) = %v, want -1", bad, got)
		}
	}
}
