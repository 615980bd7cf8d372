// Package descriptors reads the descriptor config of Envoy's reference rate
// limit service (envoyproxy/ratelimit) and matches request descriptors
// against it exactly as that service does, so that an existing deployment's
// files work unchanged.
//
// A file holds one domain and a tree of descriptors:
//
//	domain: messaging
//	descriptors:
//	  - key: message_type
//	    value: marketing
//	    descriptors:
//	      - key: to_number
//	        rate_limit: {unit: day, requests_per_unit: 5}
//
// Matching (Set.Lookup), for a request descriptor of N entries:
//
//   - Level by level: entry i is looked up among the config descriptors of
//     nesting depth i; only a rate_limit at depth N applies. A two-entry
//     descriptor never matches a depth-one rule.
//   - At each level key+value is tried first, then the wildcard values in
//     config order (each `*` matches any run of characters), then the key
//     alone. A rule without a value counts each distinct value apart (the
//     counter is keyed by every entry's value); a wildcard rule with
//     share_threshold counts every matching value in one counter.
//   - A descriptor with neither rate_limit nor children is whitelisted.
//
// Sluice adds, per descriptor: algorithm (default fixed_window, as the
// reference service counts), burst, the fleet options sync, lease and
// shards, and report. Everything else is the reference format, and unknown
// keys are errors naming the file and line.
//
// A Set is immutable and safe for concurrent use.
package descriptors

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/rules"
)

// Unit is a rate_limit unit as the reference service treats it: each is a
// fixed number of seconds, and windows are aligned to multiples of it since
// the Unix epoch (a "month" is 30 days and a "year" 365, not calendar
// months or years).
type Unit uint8

// The units, in the order of Envoy's RateLimitResponse.RateLimit.Unit names.
const (
	Second Unit = iota + 1
	Minute
	Hour
	Day
	Week
	Month
	Year
)

var unitNames = [...]string{"", "second", "minute", "hour", "day", "week", "month", "year"}

var unitPeriods = [...]time.Duration{0, time.Second, time.Minute, time.Hour, 24 * time.Hour,
	7 * 24 * time.Hour, 30 * 24 * time.Hour, 365 * 24 * time.Hour}

// String returns the unit's name in lower case ("second", …, "year").
func (u Unit) String() string {
	if int(u) < len(unitNames) && u > 0 {
		return unitNames[u]
	}
	return "unknown"
}

// Period returns the unit's length, or 0 for an invalid unit.
func (u Unit) Period() time.Duration {
	if int(u) < len(unitPeriods) {
		return unitPeriods[u]
	}
	return 0
}

// ParseUnit reads a unit name, in any case ("minute", "MINUTE").
func ParseUnit(s string) (Unit, bool) {
	l := strings.ToLower(s)
	for i := 1; i < len(unitNames); i++ {
		if unitNames[i] == l {
			return Unit(i), true
		}
	}
	return 0, false
}

// Rule is a descriptor with a rate_limit: what applies to the request
// descriptors it matches.
type Rule struct {
	// Domain is the domain of the file the rule comes from.
	Domain string
	// Path names the descriptor in the config, as the reference service's
	// stats do: "key_value.key2" (values only where the config has one).
	Path string
	// Name and Replaces are rate_limit.name and rate_limit.replaces[].name.
	Name     string
	Replaces []string
	// Unlimited rules are answered OK without asking the store.
	Unlimited bool
	// RequestsPerUnit per Unit. 0 denies every request (a block list),
	// without asking the store.
	RequestsPerUnit uint32
	Unit            Unit
	// UnitMultiplier is an override's unit_multiplier: the period is that
	// many units. 0 (and 1) for one unit.
	UnitMultiplier uint32
	// Algorithm and Limit are what the store enforces: Limit.Rate is
	// RequestsPerUnit, Limit.Period the Unit's period, Limit.Burst the
	// descriptor's burst.
	Algorithm sluice.Algorithm
	Limit     sluice.Limit
	// Shadow (shadow_mode): counted and reported, never denies.
	Shadow bool
	// Quota (quota_mode): a request is denied by quota rules only if every
	// quota rule that applies to it is over (one also in Shadow never is).
	Quota bool
	// Report (report: true): every request charges its hits even past the
	// limit, the overage carried as debt.
	Report bool
	// DetailedMetric and ValueToMetric put request values into the
	// metric's descriptor label (bounded by the metrics package).
	DetailedMetric bool
	ValueToMetric  bool
	// Fleet options (Redis store only), as the rule options of the main
	// config: Sync is the hybrid interval, Lease "auto" or a chunk size,
	// Shards the number of Redis keys each counter is split over (N ≥ 2),
	// or auto: only the keys this instance finds hot, over as many shards
	// as the Cluster has masters.
	Sync   time.Duration
	Lease  rules.AutoCount
	Shards rules.AutoCount

	// File and Line locate the descriptor in its file.
	File string
	Line int

	head    string // store-key prefix: what a counter means (domain, algorithm, limit)
	full    string // FullName
	fromReq bool   // the metric label carries request values (detailed_metric, value_to_metric on the path)
	cached  atomic.Value
}

// Period returns the length of r's window: UnitMultiplier units.
func (r *Rule) Period() time.Duration {
	return r.Unit.Period() * time.Duration(max(r.UnitMultiplier, 1))
}

// Head returns the start of every store key of r: "envoy:ID|FP|", ID
// naming the descriptor (domain and config path) and FP what its counters
// mean (algorithm and limit), the shape of a main-config rule's keys, so
// that the daemon's fleet routing finds the rule of a key by its head.
func (r *Rule) Head() string { return r.head }

// FullName returns a name for r in metrics and logs: "envoy/DOMAIN/PATH".
func (r *Rule) FullName() string {
	if r.full != "" {
		return r.full
	}
	return "envoy/" + r.Domain + "/" + r.Path
}

// Cached returns what SetCached stored on r, or nil: a slot for a
// transport's per-rule state (such as its metric handles), so that the hot
// path needs no map lookup.
func (r *Rule) Cached() any { return r.cached.Load() }

// SetCached stores v on r (always a value of the same type).
func (r *Rule) SetCached(v any) { r.cached.Store(v) }

// Entry is one key/value pair of a request descriptor.
type Entry struct{ Key, Value string }

// Set is the descriptor config in force: every domain of every file.
type Set struct {
	domains map[string]*node
	order   []string // domains in load order
	files   []string
	skipped []string
	rules   int
	digest  [32]byte
}

// Domains returns the number of domains in s.
func (s *Set) Domains() int {
	if s == nil {
		return 0
	}
	return len(s.domains)
}

// Rules returns the number of rate limits in s.
func (s *Set) Rules() int {
	if s == nil {
		return 0
	}
	return s.rules
}

// Files returns the files s was read from, in load order.
func (s *Set) Files() []string {
	if s == nil {
		return nil
	}
	return s.files
}

// Skipped returns the entries of the listed directories that were not
// read (subdirectories, files not named *.yaml or *.yml; hidden ones
// aside), in directory order. The reference service reads every file
// under its directory, so each may hold a domain it served.
func (s *Set) Skipped() []string {
	if s == nil {
		return nil
	}
	return s.skipped
}

// Each calls f for every rule of s, domain by domain in file order, and
// in config order within a domain.
func (s *Set) Each(f func(*Rule)) {
	if s == nil {
		return
	}
	var walk func(n *node)
	walk = func(n *node) {
		if n.rule != nil {
			f(n.rule)
		}
		for _, c := range n.order {
			walk(c)
		}
	}
	for _, d := range s.order {
		walk(s.domains[d])
	}
}

// Digest is a SHA-256 of the files s was read from (names and contents):
// equal digests mean nothing changed.
func (s *Set) Digest() [32]byte {
	if s == nil {
		return [32]byte{}
	}
	return s.digest
}

// HasDomain reports whether s has a config for domain.
func (s *Set) HasDomain(domain string) bool {
	if s == nil {
		return false
	}
	_, ok := s.domains[domain]
	return ok
}

// node is one level of a domain's descriptor tree.
type node struct {
	children map[kv]*node        // by key and value; value "" for a key alone
	wild     []wildcard          // wildcard children, in config order
	wix      map[string]*keyWild // wild indexed by key (see indexWild)
	order    []*node             // every child, in config order
	rule     *Rule
	key      string
	value    string // the config value: literal, pattern, or ""
	share    bool   // share_threshold
	v2m      bool   // value_to_metric
	detailed bool   // detailed_metric
	line     int    // of the descriptor in its file
	at       string // its place in the file: "descriptors[1]"
}

type wildcard struct {
	key   string
	parts []string // the value split on "*"
	n     *node
}

// kv names a child: its key and value, apart, so that no key can pass
// for another key and value whatever bytes either holds.
type kv struct{ key, value string }

// ruleHead is the store-key prefix of the counters of the descriptor at
// path in domain under a limit: "envoy:ID|FP|" (see Rule.Head).
func ruleHead(domain, path string, a sluice.Algorithm, l sluice.Limit) string {
	id := sha256.New()
	writeHashLP(id, domain)
	writeHashLP(id, path)
	fp := sha256.New()
	fmt.Fprintf(fp, "%s|%d|%d|%d|%d", a, l.Rate, l.Period.Microseconds(), l.Burst, l.Segments)
	return "envoy:" + hex.EncodeToString(id.Sum(nil)[:6]) + "|" + hex.EncodeToString(fp.Sum(nil)[:4]) + "|"
}

func writeHashLP(h hash.Hash, s string) {
	fmt.Fprintf(h, "%d:%s", len(s), s)
}

// Override returns the rule for a request descriptor that carries its own
// limit (Envoy's per-descriptor `limit`): the config is bypassed, the
// limit is counted as a fixed window, never in shadow mode, as the
// reference service does. The period is multiplier units (Envoy's
// unit_multiplier; 0 means 1). ok is false for an invalid unit or a period
// too long to count.
func Override(domain string, requestsPerUnit uint32, u Unit, multiplier uint32) (r *Rule, ok bool) {
	if u.Period() == 0 {
		return nil, false
	}
	period := u.Period() * time.Duration(max(multiplier, 1))
	if period/time.Duration(max(multiplier, 1)) != u.Period() || period > 100*365*24*time.Hour {
		return nil, false
	}
	r = &Rule{Domain: domain, RequestsPerUnit: requestsPerUnit, Unit: u, Algorithm: sluice.FixedWindow}
	if multiplier > 1 {
		r.UnitMultiplier = multiplier
	}
	if requestsPerUnit > 0 {
		r.Limit = sluice.Limit{Rate: int64(requestsPerUnit), Period: period}
		if r.Limit.Validate() != nil {
			return nil, false
		}
	}
	r.Path = "limit override"
	r.head = ruleHead(domain, "\x00override", r.Algorithm, r.Limit)
	return r, true
}

// OverrideMatch returns the Match of an override rule (see Override) for
// entries: its metric label is the request's keys and values, as the
// reference service names it.
func OverrideMatch(r *Rule, entries []Entry) Match {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(e.Key)
		if e.Value != "" {
			b.WriteByte('_')
			b.WriteString(e.Value)
		}
	}
	return Match{Rule: r, Metric: b.String(), Detailed: true}
}
