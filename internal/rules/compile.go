package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"golang.org/x/net/http/httpguts"
	"net/http"
	"strconv"
	"strings"

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
		if name == "" {
			return Part{}, fmt.Errorf("key part %q: want header:NAME with a valid header name", s)
		}
		if msg := tokenProblem("a header name", name); msg != "" {
			return Part{}, fmt.Errorf("key part %q: %s", s, msg)
		}
		return Part{Kind: PartHeader, Name: http.CanonicalHeaderKey(name)}, nil
	case "query", "cookie":
		if name == "" {
			return Part{}, fmt.Errorf("key part %q: want %s:NAME", s, kind)
		}
		if kind == "cookie" {
			if msg := tokenProblem("a cookie name", name); msg != "" {
				return Part{}, fmt.Errorf("key part %q: %s", s, msg)
			}
			return Part{Kind: PartCookie, Name: name}, nil
		}
		if msg := queryNameProblem(name); msg != "" {
			return Part{}, fmt.Errorf("key part %q: %s", s, msg)
		}
		return Part{Kind: PartQuery, Name: name}, nil
	}
	return Part{}, fmt.Errorf("unknown key part %q (want ip, header:NAME, query:NAME, cookie:NAME, method or path)", s)
}

// tokenProblem returns what is wrong with name, a header's or a
// cookie's (what), when it is no HTTP token and so no request carries
// it: its first character a token cannot hold; "" for a token.
func tokenProblem(what, name string) string {
	for i, r := range name {
		if httpguts.IsTokenRune(r) {
			continue
		}
		switch {
		case r == ' ':
			return what + " holds no space (write the name alone)"
		case r == ':' && what == "a header name":
			return what + " holds no colon (write the name alone, without a value)"
		case r == ';' && what == "a cookie name":
			return "; separates cookies: a cookie name holds none (one part per cookie: cookie:A, cookie:B)"
		case r == '=' && what == "a cookie name":
			return "= ends a cookie's name: write the name alone"
		case r < ' ' || r == 0x7f:
			return fmt.Sprintf("%s holds no control character (%q at byte %d)", what, r, i+1)
		}
		return fmt.Sprintf("%s holds no %q (at byte %d): it is a token, of letters, digits and !#$%%&'*+-.^_`|~", what, r, i+1)
	}
	return ""
}

// queryNameProblem returns what is wrong with name, a query parameter's,
// when no request carries it as written (a request's ?a&b=1 is two
// parameters, a and b): "" when one can. A name is compared unescaped,
// so an escape in it (% or +) would match only the escape escaped.
func queryNameProblem(name string) string {
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c == '&':
			return "& separates query parameters: a request's a&b is two of them (one part per parameter: query:A, query:B)"
		case c == '=':
			return "= ends a query parameter's name: write the name alone"
		case c == '#':
			return "# ends the query: no parameter's name holds one"
		case c == ';':
			return "a query pair with ; is skipped (as Go reads a query): no parameter's name holds one"
		case c == '+' || c == '%':
			return fmt.Sprintf("%q is an escape in a query, and names are compared unescaped: write the name as it reads (%%20 and + are a space)", c)
		case c < ' ' || c == 0x7f:
			return fmt.Sprintf("a query parameter's name holds no control character (%q at byte %d)", c, i+1)
		}
	}
	return ""
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
