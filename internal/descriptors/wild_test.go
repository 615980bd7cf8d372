package descriptors

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// firstWildScan is the rule the index keeps: the first wildcard value of
// key in file order that matches value.
func firstWildScan(wild []wildcard, key, value string) int {
	for j, w := range wild {
		if w.key == key && matchWildcard(w.parts, value) {
			return j
		}
	}
	return -1
}

// TestFirstWildIndex checks the index against the scan over random
// patterns and values of a small alphabet, where many patterns match one
// value: prefixes, suffixes, both ends and stars in the middle, of two
// keys.
func TestFirstWildIndex(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	word := func(max int) string {
		b := make([]byte, r.IntN(max+1))
		for i := range b {
			b[i] = "ab*"[r.IntN(3)]
		}
		return string(b)
	}
	checked, matched := 0, 0
	for round := range 300 {
		var wild []wildcard
		seen := map[string]bool{}
		for range 1 + r.IntN(40) {
			k := []string{"k", "j"}[r.IntN(2)]
			v := word(6)
			if !strings.Contains(v, "*") {
				v += "*"
			}
			if seen[k+"\x00"+v] {
				continue // the loader refuses a key and value twice
			}
			seen[k+"\x00"+v] = true
			wild = append(wild, wildcard{key: k, parts: strings.Split(v, "*")})
		}
		n := &node{wild: wild}
		n.wix, _ = indexWild(wild)
		for range 50 {
			v := strings.ReplaceAll(word(8), "*", "c")
			for _, k := range []string{"k", "j", "x"} {
				want := firstWildScan(wild, k, v)
				if got := n.firstWild(k, v); got != want {
					t.Fatalf("round %d: firstWild(%q, %q) = %d, want %d (patterns %v)", round, k, v, got, want, wild)
				}
				checked++
				if want >= 0 {
					matched++
				}
			}
		}
	}
	if matched == 0 || matched == checked {
		t.Fatalf("%d of %d lookups matched: the cases do not tell a first match from none", matched, checked)
	}
}

// TestLookupWildcardPrecedence checks through the loader which of several
// matching values wins: the literal value, then the first wildcard in file
// order, whichever end of it is literal and however long, then the key
// alone.
func TestLookupWildcardPrecedence(t *testing.T) {
	s := mustParse(t, `
domain: p
descriptors:
  - key: k
    value: a*
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: k
    value: abc*
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: k
    value: "*.pdf"
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: k
    value: b*x*.pdf
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: k
    value: b*
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: k
    value: abcd
    rate_limit: {unit: minute, requests_per_unit: 6}
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 7}
  - key: j
    value: "*"
    rate_limit: {unit: minute, requests_per_unit: 8}
`)
	for _, tc := range []struct{ v, want string }{
		{"abcd", "k_abcd"},     // the literal value first
		{"abcde", "k_a*"},      // a* comes before the longer abc*
		{"abc.pdf", "k_a*"},    // and before *.pdf
		{"bxy.pdf", "k_*.pdf"}, // *.pdf comes before b*x*.pdf and b*
		{"bxy", "k_b*"},        // b*x*.pdf does not match
		{"zzz", "k"},           // no value matches: the key alone
		{"", "k"},              // an empty value: no wildcard of k matches
	} {
		if got, _ := lookupPath(t, s, "p", es("k", tc.v)); got != tc.want {
			t.Errorf("Lookup(k=%q) = %q, want %q", tc.v, got, tc.want)
		}
	}
	if got, _ := lookupPath(t, s, "p", es("j", "")); got != "j_*" {
		t.Errorf("Lookup(j=\"\") = %q, want j_* (a lone * matches the empty value)", got)
	}
}

// TestLookupWildcardsMergedFiles checks that the top-level wildcards of
// several files of one domain are tried in the order of the files.
func TestLookupWildcardsMergedFiles(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	for i, src := range []string{
		"domain: m\ndescriptors:\n  - key: k\n    value: \"*z\"\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
		"domain: m\ndescriptors:\n  - key: k\n    value: a*\n    rate_limit: {unit: minute, requests_per_unit: 2}\n",
	} {
		p := filepath.Join(dir, fmt.Sprintf("%d.yaml", i))
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	s, err := LoadWith(paths, LoadOptions{MergeDomains: true})
	if err != nil {
		t.Fatalf("LoadWith(MergeDomains): %v", err)
	}
	for _, tc := range []struct{ v, want string }{
		{"az", "k_*z"}, {"ab", "k_a*"}, {"bz", "k_*z"}, {"b", ""},
	} {
		if got, _ := lookupPath(t, s, "m", es("k", tc.v)); got != tc.want {
			t.Errorf("Lookup(k=%q) = %q, want %q", tc.v, got, tc.want)
		}
	}
}

func TestWildSetSizes(t *testing.T) {
	for _, n := range []int{1, 1000} {
		s := wildSet(n, "v%d/*")
		for _, tc := range []struct {
			v    string
			want string
		}{{fmt.Sprintf("v%d/a", n-1), fmt.Sprintf("k_v%d/*", n-1)}, {"v0/", "k_v0/*"}, {"x/a", ""}} {
			if got, _ := lookupPath(t, s, "w", es("k", tc.v)); got != tc.want {
				t.Errorf("n=%d: Lookup(%q) = %q, want %q", n, tc.v, got, tc.want)
			}
		}
	}
}

// wildFile returns a descriptor file of domain d whose top level, or the
// level under k_v with nested, holds n wildcard values of key k made by
// format from 0..n-1, the last with a rule.
func wildFile(n int, format string, nested bool) string {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n")
	ind := "  "
	if nested {
		b.WriteString("  - key: k\n    value: v\n    descriptors:\n")
		ind = "      "
	}
	for i := range n {
		fmt.Fprintf(&b, "%s- {key: k, value: %q", ind, fmt.Sprintf(format, i))
		if i == n-1 {
			b.WriteString(", rate_limit: {unit: second, requests_per_unit: 1}")
		}
		b.WriteString("}\n")
	}
	return b.String()
}

// TestWildcardsSharingALiteral checks the bound on the wildcard values of
// one key at one level that share the literal they are found by: the
// value past it is refused, naming file, line and level; values that
// differ in that literal are not bounded.
func TestWildcardsSharingALiteral(t *testing.T) {
	n := maxWildShared
	if s, err := Parse("ok.yaml", []byte(wildFile(n, "*-%d-*", false))); err != nil {
		t.Fatalf("%d wildcards sharing their ends: %v", n, err)
	} else if got, _ := lookupPath(t, s, "d", es("k", fmt.Sprintf("x-%d-y", n-1))); got != fmt.Sprintf("k_*-%d-*", n-1) {
		t.Errorf("Lookup = %q", got)
	}
	if _, err := Parse("ok.yaml", []byte(wildFile(3*n, "p%d/*", false))); err != nil {
		t.Errorf("%d wildcards of distinct starts: %v", 3*n, err)
	}
	if _, err := Parse("ok.yaml", []byte(wildFile(3*n, "*/%d", false))); err != nil {
		t.Errorf("%d wildcards of distinct ends: %v", 3*n, err)
	}
	for _, tc := range []struct {
		format string
		nested bool
		want   string
	}{
		{"*-%d-*", false, fmt.Sprintf(`big.yaml:%d: descriptors[%d]: wildcard value "*-%d-*": more than %d wildcard values of key "k" at the top level have the same text "" before their first *`, n+3, n, n, n)},
		{"a*%d*b", true, fmt.Sprintf(`big.yaml:%d: descriptors[0].descriptors[%d]: wildcard value "a*%d*b": more than %d wildcard values of key "k" at the level under "k_v" have the same text "a" before their first *`, n+6, n, n, n)},
		{"*%d*.pdf", false, fmt.Sprintf(`big.yaml:%d: descriptors[%d]: wildcard value "*%d*.pdf": more than %d wildcard values of key "k" at the top level have the same text ".pdf" after their last *`, n+3, n, n, n)},
	} {
		_, err := Parse("big.yaml", []byte(wildFile(n+2, tc.format, tc.nested)))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%d wildcards %q: %v\nwant %s...", n+2, tc.format, err, tc.want)
		}
	}
}

// TestWildcardsSharingALiteralMerged checks the bound across the files of
// a domain merged at the top level: the file that passes it is named, and
// the domain is not half-merged.
func TestWildcardsSharingALiteralMerged(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	if err := os.WriteFile(a, []byte(wildFile(maxWildShared, "*-%d-*", false)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b, []byte("domain: d\ndescriptors:\n  - {key: k, value: \"*-x-*\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadWith([]string{a, b}, LoadOptions{MergeDomains: true})
	want := b + `:3: descriptors[0]: wildcard value "*-x-*": more than 1000 wildcard values of key "k" at the top level (domain "d" merged from ` + a + `) have the same text "" before their first *`
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("merged: %v\nwant %s...", err, want)
	}
}
