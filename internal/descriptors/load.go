package descriptors

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/internal/yamlnode"
)

// Limits on what one file may hold, so that a bad file cannot exhaust the
// daemon.
const (
	MaxFileSize = 8 << 20 // bytes
	maxNodes    = 200_000 // YAML values that aliases add to the file's own
	MaxDepth    = 64      // nesting of descriptors
	maxProblems = 100     // told for one file, as for the config
	MaxShards   = rules.MaxShards
)

// Parse reads one descriptor file's content (file names it in errors) and
// returns it as a Set of its one domain.
func Parse(file string, data []byte) (*Set, error) {
	d, err := parseFile(file, data)
	if err != nil {
		return nil, err
	}
	s := &Set{domains: map[string]*node{d.domain: d.root}, order: []string{d.domain}, files: []string{file}, rules: d.rules}
	s.digest = sha256.Sum256(data)
	return s, nil
}

type parsed struct {
	domain string
	line   int
	root   *node
	rules  int
}

func parseFile(file string, data []byte) (*parsed, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, rules.ParseErrors{{File: file, Line: 1, Msg: "empty file: want a domain and its descriptors"}}
		}
		return nil, rules.ParseErrors{yamlError(file, data, err)}
	}
	// Documents after the first: the reference service reads the first
	// only, so empty ones (a trailing ---) are fine; a second domain, which
	// it would drop without a word, is refused.
	for {
		var extra yaml.Node
		err := dec.Decode(&extra)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, rules.ParseErrors{yamlError(file, data, err)}
		}
		if !emptyDocument(&extra) {
			return nil, rules.ParseErrors{{File: file, Line: extra.Line, Msg: "more than one YAML document (---): a descriptor file holds one domain"}}
		}
	}
	top := &doc
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		top = doc.Content[0]
	}
	d := &decoder{Walker: yamlnode.NewWalker(file, "file", maxNodes)}
	// The values the file holds itself are bounded by its size: the
	// budget bounds what its aliases add.
	d.Own(top)
	d.Merge = true // the reference service reads YAML 1.1, merge keys included
	p := &parsed{root: newNode("", "")}
	var descs *yaml.Node
	domainSeen := false
	d.mapping("", top, fields{
		"domain": func(key string, v *yaml.Node) {
			domainSeen = true
			p.line = v.Line
			d.str(&p.domain)(key, v)
			if p.domain == "" && len(d.Errs) == 0 {
				d.Fail(v, key, "must not be empty")
			}
		},
		"descriptors": func(_ string, v *yaml.Node) { descs = v },
	})
	if !domainSeen && len(d.Errs) == 0 {
		d.Fail(top, "domain", "missing: every file names its domain, such as domain: edge_proxy")
	}
	if descs != nil {
		d.descriptors("descriptors", descs, p.root, p, "", 1, false)
	}
	if len(d.Errs) > 0 {
		d.Errs.Sort()
		if len(d.Errs) > maxProblems {
			n := len(d.Errs) - maxProblems
			d.Errs = append(d.Errs[:maxProblems], &rules.ParseError{File: file, Msg: fmt.Sprintf("%d more problems not shown", n)})
		}
		return nil, d.Errs
	}
	if e := replacesRing(p.root); e != nil {
		return nil, rules.ParseErrors{e}
	}
	return p, nil
}

// emptyDocument reports whether doc holds nothing, or only a null.
func emptyDocument(doc *yaml.Node) bool {
	if len(doc.Content) == 0 {
		return true
	}
	c := doc.Content[0]
	return len(doc.Content) == 1 && c.Kind == yaml.ScalarNode && c.Tag == "!!null"
}

func newNode(key, value string) *node {
	return &node{children: map[kv]*node{}, key: key, value: value}
}

// descriptors decodes a list of descriptors into the children of parent.
// v2m tells whether a descriptor above has value_to_metric.
func (d *decoder) descriptors(key string, n *yaml.Node, parent *node, p *parsed, path string, depth int, v2m bool) {
	if depth > MaxDepth {
		d.Fail(n, key, "descriptors nested deeper than %d levels", MaxDepth)
		return
	}
	cycle, done := d.holdsItself(key, "list of descriptors", n)
	if cycle {
		return
	}
	defer done()
	d.sequence(key, n, func(k string, _ int, item *yaml.Node) {
		d.descriptor(k, item, parent, p, path, depth, v2m)
	})
	var crowd *wildCrowd
	parent.wix, crowd = indexWild(parent.wild)
	if crowd != nil {
		level := "the top level"
		if path != "" {
			level = fmt.Sprintf("the level under %q", path)
		}
		w := parent.wild[crowd.j].n
		d.Errs = append(d.Errs, &rules.ParseError{File: d.File, Line: w.line, Key: w.at, Msg: crowd.msg(parent.wild, level)})
	}
}

// descriptor decodes one descriptor and adds it to parent, with the rule of
// its rate_limit and the descriptors under it, unless a problem is told for
// it or for one under it: then parent is left without it. path is parent's
// dotted path ("" at the top), depth its nesting; aboveV2M tells whether a
// descriptor above has value_to_metric.
func (d *decoder) descriptor(key string, n *yaml.Node, parent *node, p *parsed, path string, depth int, aboveV2M bool) {
	cycle, done := d.holdsItself(key, "descriptor", n)
	if cycle {
		return
	}
	defer done()
	before := len(d.Errs)
	item := d.Resolve(key, n)
	f := d.descriptorFields(key, n)
	if item == nil || item.Kind != yaml.MappingNode {
		return
	}
	nd, full, ok := d.descriptorNode(key, item, f, parent, path)
	if !ok {
		return
	}
	if f.rl == nil && f.hasOptions() {
		d.Fail(item, key, "algorithm, burst, segments, sync, lease, shards and report belong with a rate_limit")
	}
	if f.rl != nil {
		if r := d.descriptorRule(key, item, f, p.domain, full, aboveV2M); r != nil {
			nd.rule = r
			p.rules++
		}
	}
	if f.children != nil {
		d.descriptors(key+".descriptors", f.children, nd, p, full, depth+1, aboveV2M || f.v2m)
	}
	if len(d.Errs) > before {
		return
	}
	parent.add(nd)
}

// descFields are a descriptor's fields as decoded, before they are checked.
// An option whose value did not decode is told once: its node is left nil
// (and bad set), so that it is not checked again as the zero it left
// ("burst: 0 must be at least 1" after "burst: want a whole number").
type descFields struct {
	k, v                            string
	keySeen, keyBad                 bool
	rl                              *yaml.Node
	children                        *yaml.Node
	shadow, quota, detailed, v2m    bool
	share, report                   bool
	algorithm                       string
	lease, shards                   rules.AutoCount
	burst                           int64
	segments                        int
	sync                            time.Duration
	algNode, burstNode, segNode     *yaml.Node
	leaseNode, shardsNode, syncNode *yaml.Node
	reportNode                      *yaml.Node
	bad                             bool // an option did not decode
	algBad                          bool // algorithm did not decode, or names no algorithm
}

// hasOptions reports whether the descriptor gives any of the options that
// belong with a rate_limit, whether or not its value decoded.
func (f *descFields) hasOptions() bool {
	return f.algNode != nil || f.burstNode != nil || f.segNode != nil || f.syncNode != nil || f.leaseNode != nil || f.shardsNode != nil || f.reportNode != nil || f.bad
}

// descriptorFields decodes the fields of descriptor n, telling each unknown
// field and each value that does not decode (lease and shards are checked
// against their range as well); it checks nothing else.
func (d *decoder) descriptorFields(key string, n *yaml.Node) *descFields {
	f := &descFields{}
	opt := func(node **yaml.Node, decode func(string, *yaml.Node)) func(string, *yaml.Node) {
		return func(kk string, x *yaml.Node) {
			if d.decoded(decode, kk, x) {
				*node = x
			} else {
				f.bad = true
			}
		}
	}
	d.mapping(key, n, fields{
		"key":             func(kk string, x *yaml.Node) { f.keySeen = true; f.keyBad = !d.decoded(d.str(&f.k), kk, x) },
		"value":           d.str(&f.v),
		"rate_limit":      func(_ string, x *yaml.Node) { f.rl = x },
		"descriptors":     func(_ string, x *yaml.Node) { f.children = x },
		"shadow_mode":     d.bool(&f.shadow),
		"quota_mode":      d.bool(&f.quota),
		"detailed_metric": d.bool(&f.detailed),
		"value_to_metric": d.bool(&f.v2m),
		"share_threshold": d.bool(&f.share),
		"metadata":        func(string, *yaml.Node) {}, // accepted; Sluice returns no dynamic metadata
		"algorithm": func(kk string, x *yaml.Node) {
			if !d.decoded(opt(&f.algNode, d.str(&f.algorithm)), kk, x) {
				f.algBad = true
			}
		},
		"burst":    opt(&f.burstNode, d.int64(&f.burst)),
		"segments": opt(&f.segNode, d.int(&f.segments)),
		"sync":     opt(&f.syncNode, d.duration(&f.sync)),
		"lease":    d.autoCount(&f.lease, &f.leaseNode, 1, rules.MaxLease),
		"shards":   d.autoCount(&f.shards, &f.shardsNode, 2, MaxShards),
		"report":   opt(&f.reportNode, d.bool(&f.report)),
	})
	return f
}

// autoCount decodes auto or a whole number from lo to hi into dst, telling
// any other value; *node is set to the value's node even when it is told.
func (d *decoder) autoCount(dst *rules.AutoCount, node **yaml.Node, lo, hi int) func(string, *yaml.Node) {
	return func(kk string, x *yaml.Node) {
		*node = x
		var v string
		if !d.decoded(d.str(&v), kk, x) {
			return
		}
		if err := dst.UnmarshalText([]byte(v)); err != nil || (!dst.Auto && (dst.N < lo || dst.N > hi)) {
			d.Fail(x, kk, "want auto or a whole number between %d and %d, not %q", lo, hi, v)
		}
	}
}

// descriptorNode checks the key of descriptor item and that parent has no
// descriptor of the same key and value, and returns the new node with its
// dotted path (under path, parent's); false, after telling why, when either
// check fails. It tells, too, a share_threshold on a value that is not a
// wildcard.
func (d *decoder) descriptorNode(key string, item *yaml.Node, f *descFields, parent *node, path string) (nd *node, full string, ok bool) {
	switch {
	case f.keyBad:
		return nil, "", false
	case !f.keySeen:
		d.Fail(item, key+".key", "missing: every descriptor needs a key")
		return nil, "", false
	case f.k == "":
		d.Fail(item, key+".key", "must not be empty: every descriptor needs a key")
		return nil, "", false
	}
	nd = newNode(f.k, f.v)
	nd.share, nd.v2m, nd.detailed = f.share, f.v2m, f.detailed
	nd.line, nd.at = item.Line, key
	full = f.k
	if f.v != "" {
		full += "_" + f.v
	}
	if path != "" {
		full = path + "." + full
	}
	if _, dup := parent.children[kv{f.k, f.v}]; dup {
		d.Fail(item, key, "duplicate descriptor %q: the same key and value twice at one level", full)
		return nil, "", false
	}
	if f.share && !strings.Contains(f.v, "*") {
		d.Fail(item, key+".share_threshold", "only applies to a wildcard value (one containing *), not %q", f.v)
	}
	return nd, full, true
}

// add makes nd a child of n, after those before it.
func (n *node) add(nd *node) {
	n.children[kv{nd.key, nd.value}] = nd
	n.order = append(n.order, nd)
	if strings.Contains(nd.value, "*") {
		n.wild = append(n.wild, wildcard{key: nd.key, parts: strings.Split(nd.value, "*"), n: nd})
	}
}

// descriptorRule decodes the rate_limit of descriptor item (at key, whose
// dotted path is full) and returns its rule with the descriptor's modes and
// options applied and checked, or nil when the rate_limit did not decode.
// A problem with the options is told but still returns the rule.
func (d *decoder) descriptorRule(key string, item *yaml.Node, f *descFields, domain, full string, aboveV2M bool) *Rule {
	r := d.rateLimit(key+".rate_limit", f.rl, domain)
	if r == nil {
		return nil
	}
	r.Path, r.File, r.Line = full, d.File, item.Line
	r.Shadow, r.Quota, r.DetailedMetric, r.ValueToMetric = f.shadow, f.quota, f.detailed, f.v2m
	r.Report = f.report
	r.fromReq = f.detailed || f.v2m || aboveV2M
	r.Sync, r.Lease, r.Shards = f.sync, f.lease, f.shards
	if r.Unlimited && f.hasOptions() {
		d.Fail(item, key, "an unlimited rate_limit takes no algorithm, burst, segments or fleet options")
	}
	d.ruleOptions(key, f, r)
	if r.RequestsPerUnit > 0 && !r.Unlimited && !f.algBad {
		d.ruleLimit(key, f, r)
	}
	r.head = ruleHead(domain, full, r.Algorithm, r.Limit)
	r.full = "envoy/" + r.Domain + "/" + r.Path
	return r
}

// ruleOptions sets r.Algorithm from the descriptor's algorithm, if given,
// and checks burst, segments, sync and lease, each on its own and against
// the algorithm (unless it is unknown: f.algBad, which it sets when it
// tells so).
func (d *decoder) ruleOptions(key string, f *descFields, r *Rule) {
	if f.algNode != nil {
		a, err := sluice.ParseAlgorithm(f.algorithm)
		if err != nil {
			d.Fail(f.algNode, key+".algorithm", "unknown algorithm %q (want token_bucket, leaky_bucket, fixed_window, sliding_window_log, sliding_window_counter or gcra)", f.algorithm)
			f.algBad = true // what depends on it is not checked against the default
		} else {
			r.Algorithm = a
		}
	}
	if f.burstNode != nil && f.burst < 1 {
		d.Fail(f.burstNode, key+".burst", "%d must be at least 1 (or absent: the requests_per_unit)", f.burst)
	}
	if f.segNode != nil && !f.algBad && (f.segments < 1 || r.Algorithm != sluice.SlidingWindowCounter) {
		d.Fail(f.segNode, key+".segments", "applies to algorithm sliding_window_counter only, as a whole number ≥ 1")
	}
	if f.syncNode != nil && (f.sync < time.Millisecond || f.sync > time.Minute) {
		d.Fail(f.syncNode, key+".sync", "%v must be between 1ms and 1m", f.sync)
	}
	if f.syncNode != nil && f.leaseNode != nil {
		d.Fail(f.leaseNode, key+".lease", "sync (soft) and lease (hard) exclude each other: keep one")
	}
	if (f.syncNode != nil || f.leaseNode != nil) && !f.algBad && !rules.FleetShareable(r.Algorithm, f.segments) {
		n, k := f.syncNode, key+".sync"
		if f.leaseNode != nil {
			n, k = f.leaseNode, key+".lease"
		}
		d.Fail(n, k, "%s cannot be counted by a fleet: sync and lease need token_bucket, gcra, fixed_window or sliding_window_counter with one segment", r.Algorithm)
	}
}

// ruleLimit sets r.Limit from the rate_limit, burst and segments, and tells
// if r's algorithm cannot apply it: under burst when the burst is what it
// refuses, under rate_limit otherwise.
func (d *decoder) ruleLimit(key string, f *descFields, r *Rule) {
	r.Limit = sluice.Limit{Rate: int64(r.RequestsPerUnit), Period: r.Unit.Period(), Burst: f.burst, Segments: f.segments}
	if err := r.Algorithm.ValidateLimit(r.Limit); err != nil {
		if k, msg := rules.AlgorithmLimitError(err); k == "burst" && f.burstNode != nil && r.Limit.Validate() == nil {
			d.Fail(f.burstNode, key+".burst", "%s", msg)
		} else {
			d.Fail(f.rl, key+".rate_limit", "%v", strings.TrimPrefix(err.Error(), sluice.ErrInvalidLimit.Error()+": "))
		}
	}
}

// rateLimit decodes a rate_limit block.
func (d *decoder) rateLimit(key string, n *yaml.Node, domain string) *Rule {
	r := &Rule{Domain: domain, Algorithm: sluice.FixedWindow}
	var unit string
	var unitNode, rpuNode *yaml.Node
	unitBad := false // told already: not missing, not unknown
	var rpu int64
	before := len(d.Errs)
	d.mapping(key, n, fields{
		"unit": func(k string, x *yaml.Node) {
			if d.decoded(d.str(&unit), k, x) {
				unitNode = x
			} else {
				unitBad = true
			}
		},
		"requests_per_unit": func(k string, x *yaml.Node) { rpuNode = x; d.int64(&rpu)(k, x) },
		"unlimited":         d.bool(&r.Unlimited),
		"name":              d.str(&r.Name),
		"replaces": func(k string, x *yaml.Node) {
			d.sequence(k, x, func(ik string, _ int, item *yaml.Node) {
				var name string
				n := len(d.Errs)
				d.mapping(ik, item, fields{"name": d.str(&name)})
				if len(d.Errs) > n {
					return // told
				}
				if name == "" {
					d.Fail(item, ik+".name", "missing: replaces lists {name: NAME} of the limits this one replaces")
					return
				}
				r.Replaces = append(r.Replaces, name)
			})
		},
	})
	m := d.Resolve(key, n)
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	switch {
	case r.Unlimited && unitNode != nil:
		d.Fail(unitNode, key+".unit", "an unlimited rate_limit takes no unit")
	case r.Unlimited:
	case unitBad:
	case unitNode == nil:
		d.Fail(m, key+".unit", "missing: second, minute, hour, day, week, month or year")
	default:
		u, ok := ParseUnit(unit)
		if !ok {
			d.Fail(unitNode, key+".unit", "unknown unit %q (want second, minute, hour, day, week, month or year)", unit)
		}
		r.Unit = u
	}
	if !r.Unlimited && rpuNode == nil {
		d.Fail(m, key+".requests_per_unit", "missing: how many requests per unit (0 denies every request)")
	}
	if rpuNode != nil && (rpu < 0 || rpu > math.MaxUint32) {
		d.Fail(rpuNode, key+".requests_per_unit", "%d is out of range (0 to %d)", rpu, uint32(math.MaxUint32))
	}
	r.RequestsPerUnit = uint32(max(0, min(rpu, math.MaxUint32)))
	for _, name := range r.Replaces {
		if name == r.Name {
			d.Fail(m, key+".replaces", "a limit cannot replace itself (%q)", name)
		}
	}
	if len(d.Errs) > before {
		return nil
	}
	return r
}
