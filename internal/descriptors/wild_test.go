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
		n := &node{wild: wild, wix: indexWild(wild)}
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
