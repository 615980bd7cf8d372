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
