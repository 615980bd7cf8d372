package descriptors

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// matchWildcard reports whether value matches the pattern split on "*"
// into parts: each "*" matches any run of characters, including none.
func matchWildcard(parts []string, value string) bool {
	if len(parts) == 1 {
		return parts[0] == value
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// Match is what Lookup found for one request descriptor.
type Match struct {
	// Rule is the rate limit that applies; nil when none does.
	Rule *Rule
	// Metric is the descriptor label of the metrics: Rule.Path, or with
	// detailed_metric / value_to_metric the request's values.
	Metric string
	// Detailed reports whether Metric holds request values (unbounded:
	// the metrics package caps such labels).
	Detailed bool

	shared []string // per entry: the share_threshold pattern counted instead of the value, or ""
}

// Lookup finds the rate limit for the request descriptor entries of
// domain, as the reference service does (see the package doc), and writes
// it to m. It reports whether the domain is known. A zero m.Rule means no
// limit applies.
func (s *Set) Lookup(domain string, entries []Entry, m *Match) bool {
	*m = Match{}
	if s == nil {
		return false
	}
	root := s.domains[domain]
	if root == nil {
		return false
	}
	lookup(root, entries, m, false)
	if m.Rule != nil && m.Rule.fromReq {
		lookup(root, entries, m, true) // again, building the labels
	}
	return true
}

// lookup walks the tree from root for entries, writing the rule found and
// the share_threshold patterns to m; with labels, it also builds the
// metric labels that carry request values.
func lookup(root *node, entries []Entry, m *Match, labels bool) {
	m.Rule, m.shared = nil, nil
	cur := root
	var detailed, v2m strings.Builder
	useV2M := false
	for i, e := range entries {
		var next *node
		if e.Value != "" {
			next = cur.children[kv{e.Key, e.Value}]
		}
		wild := false
		if next == nil {
			if j := cur.firstWild(e.Key, e.Value); j >= 0 {
				next, wild = cur.wild[j].n, true
			}
		}
		byValue := next != nil
		if next == nil {
			next = cur.children[kv{key: e.Key}]
		}
		if next != nil && wild && next.share {
			if m.shared == nil {
				m.shared = make([]string, len(entries))
			}
			m.shared[i] = next.value
		}
		if labels {
			if detailed.Len() > 0 {
				detailed.WriteByte('.')
				v2m.WriteByte('.')
			}
			detailed.WriteString(e.Key)
			detailed.WriteByte('_')
			if next != nil && wild && next.share {
				detailed.WriteString(next.value)
			} else {
				detailed.WriteString(e.Value)
			}
			v2m.WriteString(e.Key)
			if next != nil {
				var v string
				switch {
				case wild && next.share:
					v = next.value
				case wild && next.v2m:
					v, useV2M = e.Value, true
				case wild:
					v = next.value
				case byValue:
					v = e.Value
				case next.v2m:
					v, useV2M = e.Value, true
				}
				if v != "" {
					v2m.WriteByte('_')
					v2m.WriteString(v)
				}
			}
		}
		if next != nil && next.rule != nil && i == len(entries)-1 {
			m.Rule = next.rule
		}
		if next == nil || (len(next.children) == 0 && len(next.wild) == 0) {
			break
		}
		cur = next
	}
	if m.Rule == nil {
		m.shared = nil
		return
	}
	switch {
	case labels && m.Rule.DetailedMetric:
		m.Metric, m.Detailed = detailed.String(), true
	case labels && useV2M:
		m.Metric, m.Detailed = v2m.String(), true
	default:
		m.Metric = m.Rule.Path
	}
}

// MaxKeyLen bounds the request part of a store key: longer descriptors are
// counted under their SHA-256.
const MaxKeyLen = 512

// StoreKey returns the store key that counts the request descriptor
// entries under m.Rule: the rule's domain, algorithm and limit, and every
// entry's key and value (a share_threshold entry counts under its pattern).
// Changing a descriptor's limit or algorithm starts new counters; anything
// else keeps them.
func (m *Match) StoreKey(entries []Entry) string {
	return storeKey(m.Rule.head, entries, m.shared)
}

func storeKey(head string, entries []Entry, shared []string) string {
	// n is the length of what is counted: a share_threshold entry's
	// pattern, not its value, so that every value it matches, long or
	// short, lands in the one counter.
	n := 0
	for i, e := range entries {
		v := e.Value
		if shared != nil && shared[i] != "" {
			v = shared[i]
		}
		n += len(e.Key) + len(v) + 8
	}
	var b strings.Builder
	b.Grow(len(head) + min(n, MaxKeyLen+70))
	b.WriteString(head)
	if n > MaxKeyLen {
		h := sha256.New()
		for i, e := range entries {
			v := e.Value
			if shared != nil && shared[i] != "" {
				v = shared[i]
			}
			fmt.Fprintf(h, "%d:%s%d:%s", len(e.Key), e.Key, len(v), v)
		}
		b.WriteByte('#')
		b.WriteString(hex.EncodeToString(h.Sum(nil)))
		return b.String()
	}
	for i, e := range entries {
		v := e.Value
		if shared != nil && shared[i] != "" {
			v = shared[i]
		}
		writeLP(&b, e.Key)
		writeLP(&b, v)
	}
	return b.String()
}

// writeLP writes s length-prefixed ("3:abc"), so that no key or value can
// be spelled to collide with another.
func writeLP(b *strings.Builder, s string) {
	b.WriteString(strconv.Itoa(len(s)))
	b.WriteByte(':')
	b.WriteString(s)
}
