package descriptors

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/internal/rules"
)

// replacesRing returns the error for limits of the domain at root that
// replace each other in a ring (a replaces b, b replaces a; or through
// more), or nil. A limit a matched limit names in replaces is dropped
// (see Rule.Replaces), so when a request matches every limit of a ring,
// none of them applies: the reference service drops them all without a
// word. The error is at the first limit of the ring in config order, and
// names the ring from it.
func replacesRing(root *node) *rules.ParseError {
	var order []*node // the limits with a name and replaces, in config order
	edges := map[string][]string{}
	var walk func(n *node)
	walk = func(n *node) {
		if r := n.rule; r != nil && r.Name != "" && len(r.Replaces) > 0 {
			order = append(order, n)
			edges[r.Name] = append(edges[r.Name], r.Replaces...)
		}
		for _, c := range n.order {
			walk(c)
		}
	}
	walk(root)
	const (
		onPath = 1
		done   = 2
	)
	state := map[string]int{}
	var path []string
	var ring []string
	var visit func(name string) bool
	visit = func(name string) bool {
		switch state[name] {
		case onPath:
			ring = slices.Clone(path[slices.Index(path, name):])
			return true
		case done:
			return false
		}
		state[name] = onPath
		path = append(path, name)
		for _, next := range edges[name] {
			if visit(next) {
				return true
			}
		}
		path = path[:len(path)-1]
		state[name] = done
		return false
	}
	for _, n := range order {
		if !visit(n.rule.Name) {
			continue
		}
		// Report at the ring's first limit in config order: one whose
		// name is on the ring and that replaces the next name of it.
		for _, m := range order {
			i := slices.Index(ring, m.rule.Name)
			if i < 0 || !slices.Contains(m.rule.Replaces, ring[(i+1)%len(ring)]) {
				continue
			}
			from := append(slices.Clone(ring[i:]), ring[:i]...)
			from = append(from, from[0])
			q := make([]string, len(from))
			for j, s := range from {
				q[j] = fmt.Sprintf("%q", s)
			}
			return &rules.ParseError{File: m.rule.File, Line: m.line, Key: m.at + ".rate_limit.replaces",
				Msg: "the limits " + strings.Join(q, " → ") + " replace each other in a ring: a request that matches them all is limited by none of them"}
		}
	}
	return nil
}
