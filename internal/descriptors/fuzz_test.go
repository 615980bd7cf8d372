package descriptors

import (
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary files to the loader: it must return a Set or
// errors naming the file, never panic, and a Set it returns must answer
// lookups.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		messaging,
		"domain: d\ndescriptors:\n  - key: k\n    value: a*b*\n    share_threshold: true\n    rate_limit: {unit: hour, requests_per_unit: 10}\n",
		"domain: d\ndescriptors:\n  - {key: k, value: a*}\n  - {key: k, value: ab*}\n  - {key: k, value: \"*b\"}\n  - {key: k, value: \"*-*\"}\n  - {key: j, value: \"*\"}\n  - {key: k, value: a*b, rate_limit: {unit: hour, requests_per_unit: 1}}\n",
		"domain: d\ndescriptors:\n  - key: k\n    algorithm: gcra\n    burst: 5\n    rate_limit: {unit: second, requests_per_unit: 2, name: x, replaces: [{name: y}]}\n",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true}\n",
		"domain: &a d\ndescriptors: [*a]\n",
		"domain: d\ndescriptors:\n  - &b {key: k, rate_limit: &r {unit: second, requests_per_unit: 1}}\n  - {<<: [*b, *r], key: j, rate_limit: {<<: *r, name: n}}\n",
		"domain: d\ndescriptors:\n  - key: k\n    descriptors:\n      - key: j\n        rate_limit: {unit: year, requests_per_unit: 4294967295}\n",
		// Keys holding an invisible character (named as such).
		"domain: d\ndescriptors:\n  - key: k\n    \"rate_limit\u00a0\": {unit: second}\n    \"\ufeffvalue\": v\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		s, err := Parse("fuzz.yaml", []byte(src))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.yaml") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		for d := range s.domains {
			var m Match
			e := []Entry{{"k", "a-b"}, {"j", "x"}}
			if !s.Lookup(d, e, &m) {
				t.Fatalf("Lookup(%q) = unknown domain", d)
			}
			if m.Rule != nil && !m.Rule.Unlimited {
				_ = m.StoreKey(e)
			}
			checkWildIndex(t, s.domains[d])
		}
	})
}

// checkWildIndex checks, at every level under n, that the wildcard index
// finds what trying each wildcard in file order finds, for values made
// from the level's own patterns.
func checkWildIndex(t *testing.T, n *node) {
	for _, w := range n.wild {
		p := strings.Join(w.parts, "*")
		for _, v := range []string{"", "a-b", strings.ReplaceAll(p, "*", ""), strings.ReplaceAll(p, "*", "x"), "x" + strings.ReplaceAll(p, "*", "") + "x"} {
			for _, o := range n.wild {
				if got, want := n.firstWild(o.key, v), firstWildScan(n.wild, o.key, v); got != want {
					t.Fatalf("firstWild(%q, %q) = %d, want %d", o.key, v, got, want)
				}
			}
		}
	}
	for _, c := range n.order {
		checkWildIndex(t, c)
	}
}
