package descriptors

import (
	"fmt"
	"strings"
	"testing"
)

// wildSet returns a domain "w" whose one level holds n wildcard values
// of key k, format's "v<i>/*" or "*/v<i>", each with a rule, built directly: a file of 100,000
// descriptors exceeds the loader's node limit, but several files of one
// domain merge into one level.
func wildSet(n int, format string) *Set {
	root := newNode("", "")
	for i := range n {
		v := fmt.Sprintf(format, i)
		nd := newNode("k", v)
		nd.rule = &Rule{Domain: "w", Path: "k_" + v}
		root.children[kv{"k", v}] = nd
		root.order = append(root.order, nd)
		root.wild = append(root.wild, wildcard{key: "k", parts: strings.Split(v, "*"), n: nd})
	}
	root.wix, _ = indexWild(root.wild)
	return &Set{domains: map[string]*node{"w": root}, order: []string{"w"}}
}

// BenchmarkLookupWildcards measures one request entry's matching against a
// level of many wildcard values: a value matching none of them (every
// pattern is ruled out) and one matching the last in file order; the
// suffix cases hold patterns "*/v<i>" instead.
func BenchmarkLookupWildcards(b *testing.B) {
	for _, n := range []int{10, 1000, 100_000} {
		s := wildSet(n, "v%d/*")
		for _, c := range []struct{ name, v string }{{"none", "x/a"}, {"last", fmt.Sprintf("v%d/a", n-1)}} {
			b.Run(fmt.Sprintf("n=%d/%s", n, c.name), func(b *testing.B) {
				e := []Entry{{"k", c.v}}
				var m Match
				for b.Loop() {
					s.Lookup("w", e, &m)
				}
				if (m.Rule != nil) != (c.name == "last") {
					b.Fatalf("Lookup(%q) = %v", c.v, m.Rule)
				}
			})
		}
		s = wildSet(n, "*/v%d")
		for _, c := range []struct{ name, v string }{{"suffix-none", "a/x"}, {"suffix-last", fmt.Sprintf("a/v%d", n-1)}} {
			b.Run(fmt.Sprintf("n=%d/%s", n, c.name), func(b *testing.B) {
				e := []Entry{{"k", c.v}}
				var m Match
				for b.Loop() {
					s.Lookup("w", e, &m)
				}
				if (m.Rule != nil) != (c.name == "suffix-last") {
					b.Fatalf("Lookup(%q) = %v", c.v, m.Rule)
				}
			})
		}
	}
}
