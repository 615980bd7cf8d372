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
	maxDepth    = 64      // nesting of descriptors
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
	if depth > maxDepth {
		d.Fail(n, key, "descriptors nested deeper than %d levels", maxDepth)
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

// descriptor decodes one descriptor and adds it to parent.
func (d *decoder) descriptor(key string, n *yaml.Node, parent *node, p *parsed, path string, depth int, aboveV2M bool) {
	var (
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
	)
	cycle, done := d.holdsItself(key, "descriptor", n)
	if cycle {
		return
	}
	defer done()
	before := len(d.Errs)
	item := d.Resolve(key, n)
	// An option whose value did not decode is told once: its node is
	// left nil, so that it is not checked again as the zero it left
	// ("burst: 0 must be at least 1" after "burst: want a whole number").
	bad, algBad := false, false
	opt := func(node **yaml.Node, decode func(string, *yaml.Node)) func(string, *yaml.Node) {
		return func(kk string, x *yaml.Node) {
			if d.decoded(decode, kk, x) {
				*node = x
			} else {
				bad = true
			}
		}
	}
	d.mapping(key, n, fields{
		"key":             func(kk string, x *yaml.Node) { keySeen = true; keyBad = !d.decoded(d.str(&k), kk, x) },
		"value":           d.str(&v),
		"rate_limit":      func(_ string, x *yaml.Node) { rl = x },
		"descriptors":     func(_ string, x *yaml.Node) { children = x },
		"shadow_mode":     d.bool(&shadow),
		"quota_mode":      d.bool(&quota),
		"detailed_metric": d.bool(&detailed),
		"value_to_metric": d.bool(&v2m),
		"share_threshold": d.bool(&share),
		"metadata":        func(string, *yaml.Node) {}, // accepted; Sluice returns no dynamic metadata
		"algorithm": func(kk string, x *yaml.Node) {
			if !d.decoded(opt(&algNode, d.str(&algorithm)), kk, x) {
				algBad = true
			}
		},
		"burst":    opt(&burstNode, d.int64(&burst)),
		"segments": opt(&segNode, d.int(&segments)),
		"sync":     opt(&syncNode, d.duration(&sync)),
		"lease": func(kk string, x *yaml.Node) {
			leaseNode = x
			var v string
			if !d.decoded(d.str(&v), kk, x) {
				return
			}
			if err := lease.UnmarshalText([]byte(v)); err != nil || (!lease.Auto && (lease.N < 1 || lease.N > rules.MaxLease)) {
				d.Fail(x, kk, "want auto or a whole number between 1 and %d, not %q", rules.MaxLease, v)
			}
		},
		"shards": func(kk string, x *yaml.Node) {
			shardsNode = x
			var v string
			if !d.decoded(d.str(&v), kk, x) {
				return
			}
			if err := shards.UnmarshalText([]byte(v)); err != nil || (!shards.Auto && (shards.N < 2 || shards.N > MaxShards)) {
				d.Fail(x, kk, "want auto or a whole number between 2 and %d, not %q", MaxShards, v)
			}
		},
		"report": opt(&reportNode, d.bool(&report)),
	})
	if item == nil || item.Kind != yaml.MappingNode {
		return
	}
	switch {
	case keyBad:
		return
	case !keySeen:
		d.Fail(item, key+".key", "missing: every descriptor needs a key")
		return
	case k == "":
		d.Fail(item, key+".key", "must not be empty: every descriptor needs a key")
		return
	}
	nd := newNode(k, v)
	nd.share, nd.v2m, nd.detailed = share, v2m, detailed
	nd.line, nd.at = item.Line, key
	ck := kv{k, v}
	full := k
	if v != "" {
		full += "_" + v
	}
	if path != "" {
		full = path + "." + full
	}
	if _, dup := parent.children[ck]; dup {
		d.Fail(item, key, "duplicate descriptor %q: the same key and value twice at one level", full)
		return
	}
	if share && !strings.Contains(v, "*") {
		d.Fail(item, key+".share_threshold", "only applies to a wildcard value (one containing *), not %q", v)
	}
	opts := (algNode != nil || burstNode != nil || segNode != nil || syncNode != nil || leaseNode != nil || shardsNode != nil || reportNode != nil || bad)
	if rl == nil && opts {
		d.Fail(item, key, "algorithm, burst, segments, sync, lease, shards and report belong with a rate_limit")
	}
	if rl != nil {
		r := d.rateLimit(key+".rate_limit", rl, p.domain)
		if r != nil {
			r.Path, r.File, r.Line = full, d.File, item.Line
			r.Shadow, r.Quota, r.DetailedMetric, r.ValueToMetric = shadow, quota, detailed, v2m
			r.Report = report
			r.fromReq = detailed || v2m || aboveV2M
			r.Sync, r.Lease, r.Shards = sync, lease, shards
			if r.Unlimited && opts {
				d.Fail(item, key, "an unlimited rate_limit takes no algorithm, burst, segments or fleet options")
			}
			if algNode != nil {
				a, err := sluice.ParseAlgorithm(algorithm)
				if err != nil {
					d.Fail(algNode, key+".algorithm", "unknown algorithm %q (want token_bucket, leaky_bucket, fixed_window, sliding_window_log, sliding_window_counter or gcra)", algorithm)
					algBad = true // what depends on it is not checked against the default
				} else {
					r.Algorithm = a
				}
			}
			if burstNode != nil && burst < 1 {
				d.Fail(burstNode, key+".burst", "%d must be at least 1 (or absent: the requests_per_unit)", burst)
			}
			if segNode != nil && !algBad && (segments < 1 || r.Algorithm != sluice.SlidingWindowCounter) {
				d.Fail(segNode, key+".segments", "applies to algorithm sliding_window_counter only, as a whole number ≥ 1")
			}
			if syncNode != nil && (sync < time.Millisecond || sync > time.Minute) {
				d.Fail(syncNode, key+".sync", "%v must be between 1ms and 1m", sync)
			}
			if syncNode != nil && leaseNode != nil {
				d.Fail(leaseNode, key+".lease", "sync (soft) and lease (hard) exclude each other: keep one")
			}
			if (syncNode != nil || leaseNode != nil) && !algBad && !rules.FleetShareable(r.Algorithm, segments) {
				n, k := syncNode, key+".sync"
				if leaseNode != nil {
					n, k = leaseNode, key+".lease"
				}
				d.Fail(n, k, "%s cannot be counted by a fleet: sync and lease need token_bucket, gcra, fixed_window or sliding_window_counter with one segment", r.Algorithm)
			}
			if r.RequestsPerUnit > 0 && !r.Unlimited && !algBad {
				r.Limit = sluice.Limit{Rate: int64(r.RequestsPerUnit), Period: r.Unit.Period(), Burst: burst, Segments: segments}
				if err := r.Algorithm.ValidateLimit(r.Limit); err != nil {
					if k, msg := rules.AlgorithmLimitError(err); k == "burst" && burstNode != nil && r.Limit.Validate() == nil {
						d.Fail(burstNode, key+".burst", "%s", msg)
					} else {
						d.Fail(rl, key+".rate_limit", "%v", strings.TrimPrefix(err.Error(), sluice.ErrInvalidLimit.Error()+": "))
					}
				}
			}
			r.head = ruleHead(p.domain, full, r.Algorithm, r.Limit)
			r.full = "envoy/" + r.Domain + "/" + r.Path
			nd.rule = r
			p.rules++
		}
	}
	if children != nil {
		d.descriptors(key+".descriptors", children, nd, p, full, depth+1, aboveV2M || v2m)
	}
	if len(d.Errs) > before {
		return
	}
	parent.children[ck] = nd
	parent.order = append(parent.order, nd)
	if strings.Contains(v, "*") {
		parent.wild = append(parent.wild, wildcard{key: k, parts: strings.Split(v, "*"), n: nd})
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
