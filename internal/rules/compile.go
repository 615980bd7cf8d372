package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"golang.org/x/net/http/httpguts"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
)

// MaxNameLen bounds a rule name; names appear in store keys and metric labels.
const MaxNameLen = 64

// MaxShards bounds a rule's shards.
const MaxShards = 1024

// Bounds of a rule's lists, far above what a rule needs: every request
// the rule is asked about costs time in proportion to them. A request's
// method is looked for in match.methods, one by one, and each key part is
// read from every request the rule matches (a query or cookie part with a
// scan of the query or the Cookie header). Without them a list of a
// million items, which a config file of a few megabytes holds, would make
// every request scan it.
const (
	// MaxMethods bounds match.methods (HTTP has a few dozen methods).
	MaxMethods = 64
	// MaxKeyParts bounds key.
	MaxKeyParts = 16
	// MaxPartName bounds the NAME of a header:, query: or cookie: key part.
	MaxPartName = 256
)

// Compile checks specs and compiles them, in order. file names the config
// file in errors. The error, if any, is ParseErrors listing every problem
// found, each naming the line and key ("rules[2].rate").
//
// Defaults: algorithm DefaultAlgorithm (DefaultDelayAlgorithm for action
// delay), action reject, key [ip], burst = rate, segments 1, max_delay
// DefaultMaxDelay for action delay. max_delay is an error on other actions;
// segments is an error on algorithms other than sliding_window_counter.
func Compile(file string, specs []Spec) (*Set, error) {
	return CompileWith(file, specs, Options{})
}

// Options are the settings of a Set that come from outside its rules.
// The zero value takes the defaults.
type Options struct {
	// IP says how much of a client address an ip key part counts
	// (client_ip.ipv4_prefix, ipv6_prefix): by default an IPv4 address,
	// an IPv6 /64.
	IP clientip.Prefixes
}

// CompileWith is Compile with options.
func CompileWith(file string, specs []Spec, o Options) (*Set, error) {
	var errs ParseErrors
	set := &Set{byName: make(map[string]*Rule, len(specs))}
	firstLine := make(map[string]int, len(specs))
	for i := range specs {
		sp := &specs[i]
		path := "rules[" + strconv.Itoa(i) + "]"
		fail := func(key, format string, args ...any) {
			errs = append(errs, &ParseError{File: file, Line: sp.line(key), Key: path + "." + key, Msg: fmt.Sprintf(format, args...)})
		}
		r, ok := compileOne(sp, fail)
		if ok {
			r.ip = o.IP
		}
		if sp.Name != "" {
			if l, dup := firstLine[sp.Name]; dup {
				fail("name", "duplicate rule name %q (first used at line %d)", sp.Name, l)
				ok = false
			} else {
				firstLine[sp.Name] = sp.line("name")
			}
		}
		if !ok {
			continue
		}
		set.byName[r.Name] = r
		set.Rules = append(set.Rules, r)
	}
	if err := errs.Err(); err != nil {
		return nil, err
	}
	set.src = newSource(specs, o)
	return set, nil
}

func compileOne(sp *Spec, fail func(key, format string, args ...any)) (*Rule, bool) {
	nerr := 0
	f := func(key, format string, args ...any) { nerr++; fail(key, format, args...) }
	r := &Rule{Name: sp.Name, Path: sp.Match.Path, Fold: sp.Match.CaseInsensitive, MaxDelay: sp.MaxDelay, Sync: sp.Sync, Lease: sp.Lease, Shards: sp.Shards}
	if sp.Defer != nil {
		r.Defer = *sp.Defer
	}

	switch {
	case sp.Name == "":
		f("name", "missing: every rule needs a name")
	case len(sp.Name) > MaxNameLen:
		f("name", "%q is longer than %d characters", sp.Name, MaxNameLen)
	case !validName(sp.Name):
		f("name", "%q: use letters, digits, '-', '_' and '.' only", sp.Name)
	}

	// Duplicates are found with a set, not by a scan of those before: a
	// list of n items costs n, not n² (a 4 MiB list is 300,000 items).
	methods := make(map[string]bool, min(len(sp.Match.Methods), MaxMethods))
	if n := len(sp.Match.Methods); n > MaxMethods {
		f("match.methods", "%s lists %d methods, more than the %d a rule may: each request's method is looked for among them", ruleNamed(sp), n, MaxMethods)
	}
	for j, m := range sp.Match.Methods {
		if j == MaxMethods {
			break // the problems of the items past the bound are not told
		}
		key := "match.methods[" + strconv.Itoa(j) + "]"
		if !httpguts.ValidHeaderFieldName(m) {
			f(key, "%q is not an HTTP method", m)
			continue
		}
		m = strings.ToUpper(m)
		if methods[m] {
			f(key, "method %s listed twice", m)
			continue
		}
		methods[m] = true
		r.Methods = append(r.Methods, m)
	}

	if p := sp.Match.Path; p != "" {
		if msg := checkPath(p); msg != "" {
			f("match.path", "%q: %s", p, msg)
		} else if base, ok := strings.CutSuffix(p, "*"); ok {
			r.prefix, r.base = true, joinPrefix(r.canonical(base))
		} else {
			r.base = r.canonical(p)
		}
	}

	keys := sp.Key
	if keys != nil && len(keys) == 0 {
		// Written as key: [], perhaps meant as one counter for every
		// client: taking it for the default would count per address.
		f("key", "empty: a rule needs at least one key part; leave key out for the default, [ip] (one counter per client address)")
	}
	if len(keys) == 0 {
		keys = []string{"ip"}
	}
	if n := len(keys); n > MaxKeyParts {
		f("key", "%s has %d key parts, more than the %d a rule may: each is read from every request the rule matches", ruleNamed(sp), n, MaxKeyParts)
		keys = keys[:MaxKeyParts] // the problems of those past the bound are not told
	}
	parts := make(map[Part]bool, len(keys))
	for j, k := range keys {
		key := "key[" + strconv.Itoa(j) + "]"
		if len(sp.Key) == 0 {
			key = "key"
		}
		if kind, name, _ := strings.Cut(k, ":"); len(name) > MaxPartName && (kind == "header" || kind == "query" || kind == "cookie") {
			// Not echoed whole: a name of megabytes would make the
			// message as long.
			f(key, "%s: key part %q has a name of %d bytes, more than the %d a name may: it is read from every request the rule matches", ruleNamed(sp), strings.ToValidUTF8(k[:len(kind)+1+32], "")+"…", len(name), MaxPartName)
			continue
		}
		p, err := ParsePart(k)
		if err != nil {
			f(key, "%v", err)
			continue
		}
		// Told once for each item that repeats one before it, not once
		// for each copy before it: n copies made n²/2 problems.
		if parts[p] {
			f(key, "key part %q listed twice", k)
		}
		parts[p] = true
		r.Key = append(r.Key, p)
	}

	actionOK := true
	if sp.Action != "" {
		a, err := ParseAction(sp.Action)
		if err != nil {
			f("action", "%v", err)
			actionOK = false
		}
		r.Action = a
	}

	switch {
	case sp.Algorithm != "":
		a, err := sluice.ParseAlgorithm(sp.Algorithm)
		if err != nil {
			f("algorithm", "unknown algorithm %q (want token_bucket, leaky_bucket, fixed_window, sliding_window_log, sliding_window_counter or gcra)", sp.Algorithm)
		}
		r.Algorithm = a
	case r.Action == Delay:
		r.Algorithm = DefaultDelayAlgorithm
	default:
		r.Algorithm = DefaultAlgorithm
	}

	limitOK := true
	if sp.Rate == "" {
		f("rate", "missing: every rule needs a rate such as 100/s or 5/m")
		limitOK = false
	} else if l, err := sluice.ParseLimit(sp.Rate); err != nil {
		f("rate", "%s", strings.TrimPrefix(err.Error(), sluice.ErrInvalidLimit.Error()+": "))
		limitOK = false
	} else {
		r.Limit = l
	}
	if sp.Burst < 0 {
		f("burst", "%d must not be negative", sp.Burst)
		limitOK = false
	}
	if sp.Segments < 0 || sp.Segments > 1024 {
		f("segments", "%d must be between 1 and 1024", sp.Segments)
		limitOK = false
	} else if sp.Segments > 0 && r.Algorithm.Valid() && r.Algorithm != sluice.SlidingWindowCounter {
		f("segments", "applies to sliding_window_counter only, not %s", r.Algorithm)
		limitOK = false
	}
	if limitOK {
		r.Limit.Burst = sp.Burst
		r.Limit.Segments = sp.Segments
		if err := r.Limit.Validate(); err != nil {
			msg := strings.TrimPrefix(err.Error(), sluice.ErrInvalidLimit.Error()+": ")
			key := "rate"
			switch {
			case strings.Contains(msg, "sub-windows") || strings.Contains(msg, "segments"):
				key = "segments"
			case strings.HasPrefix(msg, "burst"), sp.Burst > 0 && sp.Burst > r.Limit.Rate && strings.Contains(msg, "too large"):
				key = "burst"
			}
			f(key, "%s", msg)
		} else if err := r.Algorithm.ValidateLimit(r.Limit); r.Algorithm.Valid() && err != nil {
			key, msg := AlgorithmLimitError(err)
			f(key, "%s", msg)
		}
		r.Limit.Burst = r.Limit.BurstOrRate()
		if r.Limit.Segments == 0 {
			r.Limit.Segments = 1
		}
	}

	switch {
	case sp.MaxDelay < 0:
		f("max_delay", "%v must not be negative", sp.MaxDelay)
	case sp.MaxDelay > 0 && actionOK && r.Action != Delay:
		f("max_delay", "applies to action: delay only (action is %s)", r.Action)
	case sp.MaxDelay > MaxMaxDelay:
		f("max_delay", "%v is longer than the maximum %v", sp.MaxDelay, MaxMaxDelay)
	case r.Action == Delay && sp.MaxDelay == 0:
		r.MaxDelay = DefaultMaxDelay
	}
	if sp.Sync < 0 || (sp.Sync > 0 && sp.Sync < time.Millisecond) || sp.Sync > time.Minute {
		f("sync", "%v must be between 1ms and 1m", sp.Sync)
	}
	if n := sp.Shards.N; !sp.Shards.Auto && (n < 0 || n == 1 || n > MaxShards) {
		f("shards", "%d must be between 2 and %d (or auto, or absent)", n, MaxShards)
	}
	switch n := sp.Lease.N; {
	case !sp.Lease.Auto && (n < 0 || n > MaxLease):
		f("lease", "%d must be between 1 and %d (or auto)", n, MaxLease)
	case !sp.Lease.IsZero() && sp.Sync > 0:
		f("lease", "lease (a hard limit) and sync (a soft limit) exclude each other: keep one")
	case !sp.Lease.Auto && limitOK && int64(n) > r.Limit.Burst && r.Limit.Burst > 0:
		f("lease", "%d is more than the burst %d: one lease would hold the whole limit", n, r.Limit.Burst)
	}
	if (sp.Sync > 0 || !sp.Lease.IsZero()) && r.Algorithm.Valid() && !FleetShareable(r.Algorithm, sp.Segments) {
		k := "sync"
		if !sp.Lease.IsZero() {
			k = "lease"
		}
		what := r.Algorithm.String()
		if r.Algorithm == sluice.SlidingWindowCounter {
			what += fmt.Sprintf(" with %d segments", sp.Segments)
		}
		f(k, "%s cannot be counted by a fleet: sync and lease need token_bucket, gcra, fixed_window or sliding_window_counter with one segment", what)
	}
	if d := sp.Defer; d != nil {
		switch {
		case actionOK && r.Action != Defer:
			f("defer", "applies to action: defer only (action is %s)", r.Action)
		}
		if d.MaxBodyBytes < 0 || d.MaxBodyBytes > MaxDeferBodyBytes {
			f("defer.max_body_bytes", "%d must be between 1 and %d", d.MaxBodyBytes, MaxDeferBodyBytes)
		}
		if d.MaxQueue < 0 || d.MaxQueue > MaxDeferQueue {
			f("defer.max_queue", "%d must be between 1 and %d", d.MaxQueue, MaxDeferQueue)
		}
	}

	if nerr > 0 {
		return nil, false
	}
	r.Fingerprint = fingerprint(r)
	r.keyHead = r.Name + "|" + r.Fingerprint + "|"
	return r, true
}

// fingerprint digests what a counter means: the algorithm, the limit and the
// key parts. Not the name (already in the key), action, match or max_delay:
// changing those keeps the counters.
func fingerprint(r *Rule) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s|%d|%d|%d|%d", r.Algorithm, r.Limit.Rate, r.Limit.Period.Microseconds(), r.Limit.Burst, r.Limit.Segments)
	for _, p := range r.Key {
		fmt.Fprintf(h, "|%s", p)
	}
	return hex.EncodeToString(h.Sum(nil)[:4])
}

// ruleNamed returns `rule "NAME"`, for a problem to name the rule by as
// well as by its place (rules[I]), or "the rule" when it has no usable
// name.
func ruleNamed(sp *Spec) string {
	if sp.Name == "" || len(sp.Name) > MaxNameLen {
		return "the rule"
	}
	return "rule " + strconv.Quote(sp.Name)
}

func validName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return s != ""
}

// checkPath returns what is wrong with a match path, or "".
func checkPath(p string) string {
	if !strings.HasPrefix(p, "/") {
		return "must start with /"
	}
	if i := strings.IndexByte(p, '*'); i >= 0 && (i != len(p)-1 || !strings.HasSuffix(p, "/*")) {
		return "* is allowed only as a final /* (prefix match)"
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c <= ' ' || c == 0x7f || c == '?' || c == '#' {
			return "must not contain spaces, control characters, ? or #"
		}
	}
	if strings.ContainsAny(p, ";\\") {
		return "must not contain ; or \\ (requests are matched with ;parameters removed and \\ read as /)"
	}
	base := strings.TrimSuffix(p, "*")
	if strings.Contains(base, "//") || hasDotSegment(base) {
		return "is not a clean path (no //, /./ or /../); requests are matched after cleaning"
	}
	return ""
}

// ParsePart reads one key part: ip, method, path, header:NAME, query:NAME
// or cookie:NAME.
func ParsePart(s string) (Part, error) {
	kind, name, hasName := strings.Cut(s, ":")
	switch kind {
	case "ip", "method", "path":
		if hasName {
			return Part{}, fmt.Errorf("key part %q: %s takes no name", s, kind)
		}
		return Part{Kind: map[string]PartKind{"ip": PartIP, "method": PartMethod, "path": PartPath}[kind]}, nil
	case "header":
		if !httpguts.ValidHeaderFieldName(name) {
			return Part{}, fmt.Errorf("key part %q: want header:NAME with a valid header name", s)
		}
		return Part{Kind: PartHeader, Name: http.CanonicalHeaderKey(name)}, nil
	case "query", "cookie":
		if name == "" {
			return Part{}, fmt.Errorf("key part %q: want %s:NAME", s, kind)
		}
		if kind == "cookie" {
			if !httpguts.ValidHeaderFieldName(name) {
				return Part{}, fmt.Errorf("key part %q: %q is not a valid cookie name", s, name)
			}
			return Part{Kind: PartCookie, Name: name}, nil
		}
		return Part{Kind: PartQuery, Name: name}, nil
	}
	return Part{}, fmt.Errorf("unknown key part %q (want ip, header:NAME, query:NAME, cookie:NAME, method or path)", s)
}

// String returns p as written in a config: "ip", "header:X-Api-Key", ….
func (p Part) String() string {
	switch p.Kind {
	case PartIP:
		return "ip"
	case PartMethod:
		return "method"
	case PartPath:
		return "path"
	case PartHeader:
		return "header:" + p.Name
	case PartQuery:
		return "query:" + p.Name
	case PartCookie:
		return "cookie:" + p.Name
	}
	return "Part(" + strconv.Itoa(int(p.Kind)) + ")"
}

// MarshalText implements encoding.TextMarshaler (for GET /v1/rules).
func (p Part) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// FleetShareable is redisstore.Shareable: the algorithms whose count a
// fleet can share (sync) or reserve (lease).
func FleetShareable(a sluice.Algorithm, segments int) bool {
	switch a {
	case sluice.TokenBucket, sluice.GCRA, sluice.FixedWindow:
		return true
	case sluice.SlidingWindowCounter:
		return segments <= 1
	}
	return false
}

// AlgorithmLimitError splits an error of Algorithm.ValidateLimit, for a
// limit that Limit.Validate accepts, into the config key it is about and
// its message: "burst" for a window's burst other than its rate (a window
// admits its rate each period, so that burst would be shown and never
// applied), "rate" otherwise (the sliding log's bound).
func AlgorithmLimitError(err error) (key, msg string) {
	msg = strings.TrimPrefix(err.Error(), sluice.ErrInvalidLimit.Error()+": ")
	if m, ok := strings.CutPrefix(msg, "burst "); ok {
		return "burst", m
	}
	return "rate", msg
}
