package descriptors

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/rules"
)

// TestLargeFileRead: a descriptor file without aliases is bounded by its
// size (MaxFileSize), not by the budget on what aliases add: one limit per
// tenant, 30,000 tenants (2.4 MB, a file the reference service reads), is
// read whole. It used to be refused as "more than 200000 values (aliases
// expanded)", naming aliases it does not have.
func TestLargeFileRead(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n")
	const n = 30_000
	for i := range n {
		fmt.Fprintf(&b, "  - {key: tenant, value: t%d, rate_limit: {unit: second, requests_per_unit: 10}}\n", i)
	}
	if b.Len() > MaxFileSize {
		t.Fatalf("the file is %d bytes, over MaxFileSize", b.Len())
	}
	s, err := Parse("big.yaml", []byte(b.String()))
	if err != nil {
		t.Fatalf("Parse: %.300v", err)
	}
	if s.Rules() != n {
		t.Errorf("Parse: %d limits, want %d", s.Rules(), n)
	}
}

// TestAliasBombRefused: what aliases add stays bounded, however small the
// file: nine levels of nine aliases (9^9 descriptors) are refused, once,
// naming the file.
func TestAliasBombRefused(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: d\nx0: &a0 [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n")
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&b, "x%d: &a%d [", i, i)
		for j := range 9 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "{key: k%d, descriptors: *a%d}", j, i-1)
		}
		b.WriteString("]\n")
	}
	b.WriteString("descriptors: *a9\n")
	_, err := Parse("bomb.yaml", []byte(b.String()))
	var pe rules.ParseErrors
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "file too large") {
		t.Fatalf("Parse(alias bomb) = %.300v, want a 'file too large' problem", err)
	}
}

// TestProblemsBounded: a file with a problem in each of thousands of
// descriptors is told as the config is, its first 100 problems and how
// many more, not one line each: check-config printed, and every refused
// reload logged, 30,000 lines for a unit misspelt by a generator.
func TestProblemsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n")
	const n = 1000
	for i := range n {
		fmt.Fprintf(&b, "  - {key: tenant, value: t%d, rate_limit: {unit: fortnight, requests_per_unit: 10}}\n", i)
	}
	_, err := Parse("many.yaml", []byte(b.String()))
	var pe rules.ParseErrors
	if !errors.As(err, &pe) {
		t.Fatalf("Parse = %v, want problems", err)
	}
	if len(pe) != maxProblems+1 {
		t.Fatalf("%d problems, want the first %d and one saying how many more", len(pe), maxProblems)
	}
	if pe[0].Line != 3 || !strings.Contains(pe[0].Msg, `unknown unit "fortnight"`) {
		t.Errorf("first problem %q, want line 3's unit", pe[0])
	}
	last := pe[len(pe)-1]
	if want := fmt.Sprintf("%d more problems not shown", n-maxProblems); last.File != "many.yaml" || last.Msg != want {
		t.Errorf("last problem %q, want %q in many.yaml", last, want)
	}
}
