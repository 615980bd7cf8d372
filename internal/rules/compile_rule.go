package rules

import (
	"fmt"
	"golang.org/x/net/http/httpguts"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
)

// failFunc records one problem with a rule: key is the config key within
// the rule ("match.path", "key[1]"), format and args its message.
type failFunc func(key, format string, args ...any)

// compileOne checks one rule's spec and compiles it, telling each problem to
// fail, in the order of the spec's keys: the name, the match, the key, the
// action and algorithm, the limit, the delay, the fleet options, defer. It
// returns the rule and true when nothing was told, else nil and false.
func compileOne(sp *Spec, fail failFunc) (*Rule, bool) {
	nerr := 0
	f := failFunc(func(key, format string, args ...any) { nerr++; fail(key, format, args...) })
	r := &Rule{Name: sp.Name, Path: sp.Match.Path, Fold: sp.Match.CaseInsensitive, MaxDelay: sp.MaxDelay, Sync: sp.Sync, Lease: sp.Lease, Shards: sp.Shards}
	if sp.Defer != nil {
		r.Defer = *sp.Defer
	}
	checkName(sp, f)
	compileMethods(sp, r, f)
	compilePath(sp, r, f)
	compileKey(sp, r, f)
	actionOK := compileAction(sp, r, f)
	compileAlgorithm(sp, r, f)
	limitOK := compileLimit(sp, r, f)
	checkMaxDelay(sp, r, actionOK, f)
	checkFleet(sp, r, limitOK, f)
	checkDefer(sp, r, actionOK, f)
	if nerr > 0 {
		return nil, false
	}
	r.Fingerprint = fingerprint(r)
	r.keyHead = r.Name + "|" + r.Fingerprint + "|"
	return r, true
}

// checkName tells f if the rule's name is missing, too long or has
// characters other than letters, digits, '-', '_' and '.'.
func checkName(sp *Spec, f failFunc) {
	switch {
	case sp.Name == "":
		f("name", "missing: every rule needs a name")
	case len(sp.Name) > MaxNameLen:
		f("name", "%q is longer than %d characters", sp.Name, MaxNameLen)
	case !validName(sp.Name):
		f("name", "%q: use letters, digits, '-', '_' and '.' only", sp.Name)
	}
}

// compileMethods appends match.methods to r.Methods, upper-cased, and tells
// f of a list past MaxMethods (whose items past the bound are not looked
// at), of an item that is not a method and of a method listed twice.
func compileMethods(sp *Spec, r *Rule, f failFunc) {
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
}

// compilePath sets r's prefix and base from match.path, if any, or tells f
// what is wrong with it (checkPath).
func compilePath(sp *Spec, r *Rule, f failFunc) {
	p := sp.Match.Path
	if p == "" {
		return
	}
	if msg := checkPath(p); msg != "" {
		f("match.path", "%q: %s", p, msg)
	} else if base, ok := strings.CutSuffix(p, "*"); ok {
		r.prefix, r.base = true, joinPrefix(r.canonical(base))
	} else {
		r.base = r.canonical(p)
	}
}

// compileKey appends the parsed key parts to r.Key ([ip] when key is left
// out) and tells f of an empty key, a key past MaxKeyParts (whose parts past
// the bound are not looked at), a part name past MaxPartName, a part
// ParsePart rejects and a part listed twice.
func compileKey(sp *Spec, r *Rule, f failFunc) {
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
}

// compileAction sets r.Action from action, if given (reject otherwise). It
// reports false, after telling f, when the action is unknown: the checks of
// the keys that apply to one action only are then left out.
func compileAction(sp *Spec, r *Rule, f failFunc) (actionOK bool) {
	if sp.Action == "" {
		return true
	}
	a, err := ParseAction(sp.Action)
	r.Action = a
	if err != nil {
		f("action", "%v", err)
		return false
	}
	return true
}

// compileAlgorithm sets r.Algorithm from algorithm, or tells f it is
// unknown; left out, it is DefaultDelayAlgorithm for action delay and
// DefaultAlgorithm otherwise. Call it after compileAction.
func compileAlgorithm(sp *Spec, r *Rule, f failFunc) {
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
}

// compileLimit sets r.Limit from rate, burst and segments (burst defaulting
// to the rate, segments to 1) and checks it, as a limit and for r's
// algorithm, telling f each problem under the key it is about. It reports
// false when rate, burst or segments could not be read or are out of range,
// so that r.Limit is not usable; a limit that reads but fails the checks
// reports true. Call it after compileAlgorithm.
func compileLimit(sp *Spec, r *Rule, f failFunc) (limitOK bool) {
	limitOK = true
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
	if !limitOK {
		return false
	}
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
	return true
}

// checkMaxDelay tells f if max_delay is negative, past MaxMaxDelay or given
// for an action other than delay (when the action is known: actionOK), and
// sets r.MaxDelay to DefaultMaxDelay for action delay without one.
func checkMaxDelay(sp *Spec, r *Rule, actionOK bool, f failFunc) {
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
}

// checkFleet tells f what is wrong with the fleet options: sync, shards and
// lease out of range, lease beside sync, a lease past the burst (when the
// limit is usable: limitOK), and sync or lease on an algorithm a fleet
// cannot count (FleetShareable).
func checkFleet(sp *Spec, r *Rule, limitOK bool, f failFunc) {
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
}

// checkDefer tells f if defer is given for an action other than defer (when
// the action is known: actionOK) or its bounds are out of range.
func checkDefer(sp *Spec, r *Rule, actionOK bool, f failFunc) {
	d := sp.Defer
	if d == nil {
		return
	}
	if actionOK && r.Action != Defer {
		f("defer", "applies to action: defer only (action is %s)", r.Action)
	}
	if d.MaxBodyBytes < 0 || d.MaxBodyBytes > MaxDeferBodyBytes {
		f("defer.max_body_bytes", "%d must be between 1 and %d", d.MaxBodyBytes, MaxDeferBodyBytes)
	}
	if d.MaxQueue < 0 || d.MaxQueue > MaxDeferQueue {
		f("defer.max_queue", "%d must be between 1 and %d", d.MaxQueue, MaxDeferQueue)
	}
}
