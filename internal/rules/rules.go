// Package rules turns the rules of a config file (SPEC §4) into compiled
// matchers: which requests a rule applies to (method, path), which key a
// request is counted under (ip, header:NAME, query:NAME, cookie:NAME,
// method, path), and what limit, algorithm and action apply.
//
// The YAML itself is decoded by package internal/config into Spec values
// (their yaml tags name the keys); Compile
// checks them and reports every problem as a *ParseError naming the file,
// line and key. A compiled Set is immutable and safe for concurrent use.
package rules

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
)

// ParseError is one problem in a config file: FILE:LINE: KEY: MSG.
// Line is 1-based; 0 means the problem is not tied to a line (such as an
// unreadable file). Key is the dotted path of the offending key, such as
// "rules[2].rate" or "store.redis.timeout"; it may be empty.
type ParseError struct {
	File string
	Line int
	Key  string
	Msg  string
}

// Error formats e as "FILE:LINE: KEY: MSG", leaving out the parts that are
// zero.
func (e *ParseError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(e.Line))
	}
	if e.Key != "" {
		if b.Len() > 0 {
			b.WriteString(": ")
		}
		b.WriteString(e.Key)
	}
	if b.Len() > 0 {
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// ParseErrors is every problem found in one file, in line order. It is the
// error Compile (and config.Parse) returns when there is more than
// nothing wrong; use errors.As to get at it.
type ParseErrors []*ParseError

// Error joins the problems one per line.
func (es ParseErrors) Error() string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap returns the individual problems, so errors.As finds a *ParseError.
func (es ParseErrors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// Sort orders the problems by line, keeping the order of those on one line.
func (es ParseErrors) Sort() {
	sort.SliceStable(es, func(i, j int) bool { return es[i].Line < es[j].Line })
}

// Err returns es as an error, or nil when it is empty.
func (es ParseErrors) Err() error {
	if len(es) == 0 {
		return nil
	}
	es.Sort()
	return es
}

// Action is what happens to a request a rule denies.
type Action uint8

// The actions of SPEC §4. The zero value is Reject.
const (
	// Reject answers 429 with Retry-After and the SPEC §5 body.
	Reject Action = iota
	// Delay holds the request until a slot frees up, for at most the rule's
	// MaxDelay, and rejects it if none does. With the leaky bucket this
	// shapes traffic: admitted requests leave evenly spaced.
	Delay
	// Shadow counts and reports (metrics, logs) but never blocks.
	Shadow
	// Defer queues the over-limit request in a Redis Stream and replays it
	// later at the rule's rate. Parsed and validated; enforcement belongs
	// to the daemon and needs the Redis store.
	Defer
)

var actionNames = [...]string{Reject: "reject", Delay: "delay", Shadow: "shadow", Defer: "defer"}

// String returns the config name of a, such as "reject".
func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return "Action(" + strconv.Itoa(int(a)) + ")"
}

// ParseAction returns the action named s: reject, delay, shadow or defer.
func ParseAction(s string) (Action, error) {
	for i, n := range actionNames {
		if n == s {
			return Action(i), nil
		}
	}
	return 0, fmt.Errorf("unknown action %q (want reject, delay, shadow or defer)", s)
}

// MarshalText implements encoding.TextMarshaler (for GET /v1/rules).
func (a Action) MarshalText() ([]byte, error) {
	if int(a) >= len(actionNames) {
		return nil, errors.New("rules: invalid action " + a.String())
	}
	return []byte(a.String()), nil
}

// MatchSpec is the match block of a rule as written: HTTP methods (empty:
// any), a path (empty: any), exact or a prefix ending in "/*", and whether
// paths compare with case folded.
type MatchSpec struct {
	Methods         []string `yaml:"methods"`
	Path            string   `yaml:"path"`
	CaseInsensitive bool     `yaml:"case_insensitive"`
}

// Spec is one rule as written in the config file, before checking. The
// config decoder (internal/config) fills it, reading the yaml tags; Compile checks and compiles it.
// Zero values mean "not given" and take the defaults documented on Rule.
type Spec struct {
	Name      string        `yaml:"name"`
	Match     MatchSpec     `yaml:"match"`
	Key       []string      `yaml:"key"`       // key parts: ip, header:NAME, query:NAME, cookie:NAME, method, path
	Rate      string        `yaml:"rate"`      // "N/UNIT", as sluice.ParseLimit reads it
	Burst     int64         `yaml:"burst"`     // 0: the rate
	Segments  int           `yaml:"segments"`  // sliding_window_counter only; 0: 1
	Algorithm string        `yaml:"algorithm"` // "": the default (see Rule)
	Action    string        `yaml:"action"`    // "": reject
	MaxDelay  time.Duration `yaml:"max_delay"`
	// Fleet options (Redis store only). Parsed and checked here; the
	// daemon refuses those it does not enforce yet (internal/config).
	Sync   time.Duration `yaml:"sync"`   // soft limit: reconcile with Redis every Sync
	Lease  AutoCount     `yaml:"lease"`  // hard limit: reserve quota in chunks of N, or auto
	Shards AutoCount     `yaml:"shards"` // split a key's counter over N Redis keys, or auto
	// Defer holds the options of action: defer; nil when the block is
	// absent (the defaults apply).
	Defer *DeferSpec `yaml:"defer"`

	// Line is the line of the rule in the file (its first key); Lines
	// holds the line of each key that was given ("rate", "match.path",
	// "key[1]", …) so errors point at the exact line. Both may be zero.
	Line  int
	Lines map[string]int
}

// line returns the line of key in s, or the rule's line.
func (s *Spec) line(key string) int {
	if l := s.Lines[key]; l > 0 {
		return l
	}
	return s.Line
}

// DefaultMaxDelay is the max_delay of a delay rule that gives none.
const DefaultMaxDelay = time.Second

// MaxMaxDelay bounds max_delay: a request is never held longer.
const MaxMaxDelay = 5 * time.Minute

// DefaultAlgorithm is the algorithm of a rule that names none, unless its
// action is delay: sliding_window_counter reads as users read "5/m" (at
// most 5 in any minute, approximately) at the cost of two counters per key.
const DefaultAlgorithm = sluice.SlidingWindowCounter

// DefaultDelayAlgorithm is the algorithm of a delay rule that names none:
// the leaky bucket, the shaper, whose admitted requests leave evenly spaced.
const DefaultDelayAlgorithm = sluice.LeakyBucket

// Rule is a compiled rule. Rules are built by Compile and must not be
// modified afterwards; they are safe for concurrent use.
type Rule struct {
	Name      string
	Methods   []string // upper case; empty: any method
	Path      string   // as written: "" (any), "/exact" or "/prefix/*"
	Fold      bool     // match.case_insensitive: paths compare as FoldedPath
	Key       []Part   // in order; never empty (default: ip)
	Algorithm sluice.Algorithm
	Limit     sluice.Limit // Burst and Segments defaulted (never 0)
	Action    Action
	MaxDelay  time.Duration // Delay only: longest wait for a slot; 0 otherwise
	Sync      time.Duration // soft limit's interval; 0: exact
	Lease     AutoCount     // hard limit's chunk; zero: exact
	Shards    AutoCount     // zero, auto, or N ≥ 2
	Defer     DeferSpec     // action Defer only

	// Fingerprint is a short hex digest of what a counter means: the
	// algorithm, rate, period, burst, segments and key parts. Store keys
	// carry it, so a rule whose limit changes on reload starts with fresh
	// counters while an unchanged rule keeps its own.
	Fingerprint string

	prefix  bool   // Path ends in "/*"
	base    string // canonical: Path without the "*" ("/api/"), or the exact path
	keyHead string // Name + "|" + Fingerprint + "|"
	ip      clientip.Prefixes
}

// Set is the compiled rules of one config, in file order.
type Set struct {
	Rules  []*Rule
	byName map[string]*Rule
	src    source // what Compile made it from (see CompiledFrom)
}

// Rule returns the rule named name, or nil.
func (s *Set) Rule(name string) *Rule {
	if s == nil {
		return nil
	}
	return s.byName[name]
}

// Match is a rule that applies to a request, and the store key the request
// is counted under.
type Match struct {
	Rule *Rule
	Key  string
}
