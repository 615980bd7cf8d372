package descriptors

import (
	"fmt"
	"slices"
	"strings"
)

// A level's wildcard values are tried in file order and the first that
// matches wins, as in the reference service. Scanning them all for every
// request entry costs as many pattern checks as the level holds (a
// descriptor file may hold tens of thousands), so each level indexes its
// wildcards instead: by key, and then by the literal text at one end of
// the pattern, its start before the first "*" or its end after the last,
// whichever is longer. A value can only match patterns whose start is a
// prefix of it (or whose end is a suffix of it): those literals are found
// by binary search in sorted lists, and only their patterns are checked.
// The patterns one literal heads are bounded (maxWildShared), as those are
// checked one by one.

// keyWild indexes the wildcard values of one key at one level.
type keyWild struct {
	pre litIndex // by the literal start of the pattern
	suf litIndex // by the literal end of the pattern, reversed
}

// litIndex holds patterns by a literal: lits sorted and distinct, and for
// each the patterns (indexes into node.wild) it heads, in file order.
type litIndex struct {
	lits []string
	pats [][]int
}

// maxWildShared bounds the wildcard values of one key at one level that
// share the literal the index finds them by: a request value holding that
// literal is checked against each of them.
const maxWildShared = 1000

// wildCrowd tells of more than maxWildShared wildcard values sharing a
// literal: wild[j] is the first past the bound, in file order.
type wildCrowd struct {
	j   int
	lit string
	end bool // lit is the text after the last "*", not before the first
}

func (c *wildCrowd) msg(wild []wildcard, level string) string {
	w := wild[c.j]
	where := "before their first *"
	if c.end {
		where = "after their last *"
	}
	return fmt.Sprintf("wildcard value %q: more than %d wildcard values of key %q at %s have the same text %q %s (the longer of their two ends); each request value with that text would be checked against them all",
		strings.Join(w.parts, "*"), maxWildShared, w.key, level, c.lit, where)
}

// indexWild builds the index of the wildcard values wild of one level. It
// reports the first wildcard value past maxWildShared ones sharing a
// literal, if any.
func indexWild(wild []wildcard) (map[string]*keyWild, *wildCrowd) {
	if len(wild) == 0 {
		return nil, nil
	}
	type build struct{ pre, suf map[string][]int }
	byKey := map[string]*build{}
	for j, w := range wild {
		b := byKey[w.key]
		if b == nil {
			b = &build{pre: map[string][]int{}, suf: map[string][]int{}}
			byKey[w.key] = b
		}
		first, last := w.parts[0], w.parts[len(w.parts)-1]
		if len(last) > len(first) {
			r := reverse(last)
			b.suf[r] = append(b.suf[r], j)
		} else {
			b.pre[first] = append(b.pre[first], j)
		}
	}
	idx := make(map[string]*keyWild, len(byKey))
	var crowd *wildCrowd
	for k, b := range byKey {
		idx[k] = &keyWild{pre: newLitIndex(b.pre), suf: newLitIndex(b.suf)}
		for lit, pats := range b.pre {
			if len(pats) > maxWildShared && (crowd == nil || pats[maxWildShared] < crowd.j) {
				crowd = &wildCrowd{j: pats[maxWildShared], lit: lit}
			}
		}
		for lit, pats := range b.suf {
			if len(pats) > maxWildShared && (crowd == nil || pats[maxWildShared] < crowd.j) {
				crowd = &wildCrowd{j: pats[maxWildShared], lit: reverse(lit), end: true}
			}
		}
	}
	return idx, crowd
}

func newLitIndex(m map[string][]int) litIndex {
	var l litIndex
	for s := range m {
		l.lits = append(l.lits, s)
	}
	slices.Sort(l.lits)
	l.pats = make([][]int, len(l.lits))
	for i, s := range l.lits {
		l.pats[i] = m[s]
	}
	return l
}

// firstWild returns the index in n.wild of the first wildcard value of key
// in file order that matches value, or -1.
func (n *node) firstWild(key, value string) int {
	kw := n.wix[key]
	if kw == nil {
		return -1
	}
	best := -1
	try := func(pats []int) {
		for _, j := range pats {
			if best >= 0 && j >= best {
				return // file order: a later pattern cannot win
			}
			if matchWildcard(n.wild[j].parts, value) {
				best = j
				return
			}
		}
	}
	kw.pre.prefixesOf(value, try)
	if len(kw.suf.lits) > 0 {
		var buf [64]byte
		kw.suf.prefixesOf(string(appendReverse(buf[:0], value)), try)
	}
	return best
}

// prefixesOf calls f with the patterns of every literal that is a prefix
// of v, longest first. Each step searches below a bound that is a shorter
// prefix of v than the one before, so there are at most len(v)+1 steps,
// and usually as many as there are matching literals, plus one.
func (l *litIndex) prefixesOf(v string, f func([]int)) {
	limit := v
	for {
		i, found := slices.BinarySearch(l.lits, limit)
		if !found {
			i--
		}
		if i < 0 {
			return
		}
		s := l.lits[i] // the greatest literal <= limit
		if strings.HasPrefix(v, s) {
			f(l.pats[i])
			if s == "" {
				return
			}
			limit = v[:len(s)-1]
			continue
		}
		// s differs from v at c, where its byte is the smaller: every
		// literal that is a prefix of v and sorts below s is a prefix of
		// v[:c], and c < len(limit).
		c := 0
		for c < len(s) && c < len(v) && s[c] == v[c] {
			c++
		}
		limit = v[:c]
	}
}

func reverse(s string) string { return string(appendReverse(nil, s)) }

func appendReverse(b []byte, s string) []byte {
	for i := len(s) - 1; i >= 0; i-- {
		b = append(b, s[i])
	}
	return b
}
