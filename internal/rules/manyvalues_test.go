package rules

import (
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A key part sent with very many different values is refused as too many
// (past MaxKeysPerRule) in time linear in the request: the values were
// gathered with a look through those gathered so far for each, a cost of
// the square, which a request of a megabyte (the most net/http reads)
// made seconds of CPU per rule (14 s for 60,000 header values through the
// proxy). The wait below is a hang detector, far above the milliseconds
// the refusal takes.
func TestManyKeyValuesRefusedLinearly(t *testing.T) {
	const n = 200_000
	vals := make([]string, n)
	for i := range vals {
		vals[i] = strconv.Itoa(i)
	}
	set := mustCompile(t,
		Spec{Name: "h", Rate: "1/s", Key: []string{"header:X-Api-Key"}},
		Spec{Name: "q", Rate: "1/s", Key: []string{"query:k"}},
		Spec{Name: "c", Rate: "1/s", Key: []string{"cookie:sid"}},
	)
	for i, part := range []string{"header:X-Api-Key", "query:k", "cookie:sid"} {
		req := request("GET", "/")
		switch i {
		case 0:
			req.Header["X-Api-Key"] = append([]string{""}, vals...)
		case 1:
			req.URL.RawQuery = "k=&k=" + strings.Join(vals, "&k=")
		case 2:
			req.Header["Cookie"] = []string{"sid=; sid=" + strings.Join(vals, "; sid=")}
		}
		err := matchOrHang(t, &Set{Rules: set.Rules[i : i+1]}, req, fmt.Sprintf("%s: Match of a request with %d values", part, n))
		var ae *AmbiguousKeyError
		if !errors.As(err, &ae) || !ae.TooMany || ae.Part.String() != part {
			t.Errorf("%s with %d values: Match = %v, want too many values", part, n, err)
		}
	}
}

// A query sent with very many different values of a key part, as big as
// net/http admits (a request head of 1 MiB), is refused without holding
// them all: the first MaxKeysPerRule+1 different values decide. Every
// value was gathered, in a slice and a map, some 27 bytes for each byte
// of the query (46 MB for a query of 1.7 MB), and with a '#' in it (read
// before it, then on past it), each value of the second reading was
// looked for through all those of the first, one by one: 50 s of CPU for
// one request of 200,000 values. Allocation is measured over the Match
// alone (a generous bound: the query's own size); the wait is a hang
// detector, far above the milliseconds the refusal takes.
func TestManyQueryValuesRefusedInBoundedMemory(t *testing.T) {
	const n = 120_000 // "k=N&" of up to 10 bytes each: under 1 MiB
	vals := make([]string, n)
	for i := range vals {
		vals[i] = strconv.Itoa(i)
	}
	set := mustCompile(t, Spec{Name: "q", Rate: "1/s", Key: []string{"query:k"}})
	for _, frag := range []string{"", "#", "#&k=x"} {
		req := request("GET", "/")
		req.URL.RawQuery = "k=" + strings.Join(vals, "&k=") + frag
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		err := matchOrHang(t, set, req, fmt.Sprintf("query ending %q: Match of %d values", frag, n))
		runtime.ReadMemStats(&after)
		var ae *AmbiguousKeyError
		if !errors.As(err, &ae) || !ae.TooMany {
			t.Errorf("query ending %q with %d values: Match = %v, want too many values", frag, n, err)
		}
		t.Logf("query ending %q, %d bytes: %d bytes allocated", frag, len(req.URL.RawQuery), after.TotalAlloc-before.TotalAlloc)
		if got, limit := after.TotalAlloc-before.TotalAlloc, uint64(len(req.URL.RawQuery)); got > limit {
			t.Errorf("query ending %q of %d bytes, %d values: Match allocated %d bytes, want at most the query's size", frag, len(req.URL.RawQuery), n, got)
		}
	}
}

// matchOrHang returns the error of set.Match(req); past 30 s, a hang
// detector far above the milliseconds it takes, it fails t, saying what
// was still running.
func matchOrHang(t *testing.T, set *Set, req *http.Request, what string) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := set.Match(req, ip1, nil)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("%s still running after 30s", what)
		return nil
	}
}
