package rules

import (
	"errors"
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
		one := &Set{Rules: set.Rules[i : i+1]}
		done := make(chan error, 1)
		go func() {
			_, err := one.Match(req, ip1, nil)
			done <- err
		}()
		var err error
		select {
		case err = <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: Match of a request with %d values still running after 30s", part, n)
		}
		var ae *AmbiguousKeyError
		if !errors.As(err, &ae) || !ae.TooMany || ae.Part.String() != part {
			t.Errorf("%s with %d values: Match = %v, want too many values", part, n, err)
		}
	}
}
