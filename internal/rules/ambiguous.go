package rules

import (
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/hop"
)

// AmbiguousKeyError is the error of Set.Match for a request whose key part
// Part of Rule the app behind may read as another value than any Sluice
// would count: the part is sent under another spelling of its name that
// frameworks read as it, or (TooMany) with more different values than
// Set.Match counts (MaxKeysPerRule). Such a request must be refused
// (400): counted under one value, it would let a client send a fresh value
// where Sluice counts and another client's where the app reads, and never
// be limited. (A part sent twice under its own name is counted under each
// of its values instead, which no choice of values escapes.)
//
// Ambiguous are: a header alongside or instead of a name that is the same
// once '_' is read as '-' and case folded (CGI, WSGI, Rack and PHP read
// X_Api_Key and X-Api-Key both as HTTP_X_API_KEY); a query parameter or a
// cookie under a name that decodes or mangles to it (api%5Fkey, api_key[]
// and api_key[x] for PHP's and Rails' arrays, PHP's api.key, api+key and
// api[key, ASP.NET's API_KEY); a query pair with a ';' that names it.
// So is, to a rule that lists methods or is keyed by method, a POST whose
// method overrides (override.go) name more methods than MaxKeysPerRule,
// its own included: Part is then the method part, and TooMany is set.
type AmbiguousKeyError struct {
	Rule    *Rule
	Part    Part
	TooMany bool // sent with more than MaxKeysPerRule values (or combinations)
}

func (e *AmbiguousKeyError) Error() string {
	if e.TooMany && e.Part.Kind == PartMethod {
		return "ambiguous key: rule " + strconv.Quote(e.Rule.Name) + ": the request names more than " + strconv.Itoa(MaxKeysPerRule) +
			" methods (its own and its method overrides'), which the app behind may serve it as any of"
	}
	if e.TooMany {
		return "ambiguous key: rule " + strconv.Quote(e.Rule.Name) + ": " + e.Part.String() +
			" is sent with more than " + strconv.Itoa(MaxKeysPerRule) + " different values, which the app behind may read any of"
	}
	return "ambiguous key: rule " + strconv.Quote(e.Rule.Name) + ": " + e.Part.String() +
		" is sent under another spelling of its name, which the app behind may read instead"
}

// underscored reports whether some header name of h has a '_': only then
// can a header have an alias (headerAlias). It scans h once per request.
func (p *reqPath) underscored(h http.Header) bool {
	if p.under == 0 {
		p.under = 1
		for k := range h {
			if strings.IndexByte(k, '_') >= 0 {
				p.under = 2
				break
			}
		}
	}
	return p.under == 2
}

// headerAlias reports whether h has a header other than name that is name
// once '_' is read as '-' and case folded.
func headerAlias(h http.Header, name string) bool {
	for k := range h {
		if k != name && hop.SameName(k, name) {
			return true
		}
	}
	return false
}

// nameAlias reports whether k, a decoded query parameter or cookie name
// other than name, is read as name by some framework: PHP drops leading
// spaces, reads ' ' and '.' as '_', k[...] as an array of k and an
// unclosed '[' as '_'; Rails reads k[] and k[x] as k's; ASP.NET folds
// case.
func nameAlias(k, name string) bool {
	k = strings.TrimLeft(k, " ")
	if i := strings.IndexByte(k, '['); i >= 0 {
		if strings.IndexByte(k[i:], ']') >= 0 {
			k = k[:i]
		} else if len(k) == len(name) && name[i] == '_' {
			return sameParamName(k[:i], name[:i]) && strings.EqualFold(k[i+1:], name[i+1:])
		} else {
			return false
		}
	}
	return len(k) == len(name) && sameParamName(k, name)
}

func sameParamName(a, b string) bool {
	for i := 0; i < len(a); i++ {
		if foldParamByte(a[i]) != foldParamByte(b[i]) {
			return false
		}
	}
	return true
}

func foldParamByte(c byte) byte {
	switch {
	case c == ' ' || c == '.':
		return '_'
	case 'A' <= c && c <= 'Z':
		return c + 'a' - 'A'
	}
	return c
}

// queryValue returns the first value of parameter name in a raw query, or
// "" — without building the whole url.Values map — and whether name is
// sent with more than one value (multi) or is ambiguous: a name
// apps read as it (nameAlias), or either in a pair with a ';', which Rack
// 2 and Python's parse_qs before 3.9.2 split as they split on '&'. It
// reads the query as url.ParseQuery does (so as URL.Query().Get,
// httplimit and a Go upstream read it): a pair with a ';' or a bad escape
// is skipped, not taken for the value, since httputil.ReverseProxy drops
// such pairs on the way upstream and the upstream would read the next
// one. If all is not nil, name's values are added to *all in order, by
// addValue: its first MaxKeysPerRule+1 different ones not empty, which
// are all a rule looks at, whatever the number sent (a query of a
// megabyte holds some 100,000).
func queryValue(raw, name string, all *[]string) (value string, multi, ambiguous bool) {
	found := false
	for raw != "" {
		var kv string
		kv, raw, _ = strings.Cut(raw, "&")
		if strings.IndexByte(kv, ';') >= 0 {
			if semicolonNames(kv, name) {
				return "", false, true
			}
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		if strings.ContainsAny(k, "%+") {
			var err error
			if k, err = url.QueryUnescape(k); err != nil {
				continue
			}
		}
		if k != name {
			if nameAlias(k, name) && validEscapes(v) {
				return "", false, true
			}
			continue
		}
		if strings.ContainsAny(v, "%+") {
			u, err := url.QueryUnescape(v)
			if err != nil {
				continue
			}
			v = u
		}
		if all != nil {
			*all = addValue(*all, v)
		}
		if !found {
			found, value = true, v
		} else if v != value {
			multi = true
		}
	}
	return value, multi, false
}

// cookieValue returns the value of cookie name in h, as Request.Cookie
// reads it (cookiePart) but past its cap on the number of cookies, or
// ok=false; multi when name is sent more than once with different values
// (on one Cookie line or two: browsers do, for cookies of one name set
// for different paths or domains); ambiguous when a cookie name apps read
// as it is sent: PHP URL-decodes cookie names and reads them as query
// names (nameAlias).
func cookieValue(req *http.Request, name string) (value string, ok, multi, ambiguous bool) {
	for _, line := range req.Header["Cookie"] {
		for line != "" {
			var part string
			part, line, _ = strings.Cut(line, ";")
			k, v, named := cookiePart(part, name)
			if named {
				if !ok {
					value, ok = v, true
				} else if v != value {
					multi = true
				}
				continue
			}
			if k == "" || k == name {
				continue // empty, or name's with a value no cookie may hold (skipped, as net/http does)
			}
			if strings.ContainsAny(k, "%+") {
				if u, err := url.QueryUnescape(k); err == nil {
					k = u
				}
			}
			if k == name || nameAlias(k, name) {
				return "", false, false, true
			}
		}
	}
	return value, ok, multi, false
}

// cookiePart reads one ';'-separated part of a Cookie header as net/http's
// Request.Cookie does — the part trimmed, its name trimmed, the value's
// double quotes stripped, and a value with a byte a cookie may not hold
// skipped — and reports whether it is a cookie named name with a value
// (v), URL-decoded as PHP, Node's cookie module (Express), Rack and Rails
// read it ("%61bc" is "abc", '+' a space; a value whose escapes do not
// decode is kept as it came, as they keep it): read as net/http leaves
// it, each escape of a session's value was a fresh count of that session
// for such an app. k is the part's name. Read part by part, the header has no cap on
// its cookies: net/http finds none in a header of more than 3000
// (httpcookiemaxnum), which would let a client pad its Cookie header to
// hide its key from a rule while the app behind, which has no such cap
// (PHP, Node, Python, Java), reads it.
func cookiePart(part, name string) (k, v string, named bool) {
	k, v, _ = strings.Cut(textproto.TrimString(part), "=")
	if k = textproto.TrimString(k); k != name {
		return k, "", false
	}
	v, ok := cookieText(v)
	if !ok {
		return k, "", false
	}
	return k, v, true
}

// cookieText reads a cookie's value v as cookiePart does: its double
// quotes stripped, then URL-decoded unless its escapes do not decode; or
// ok=false when it holds a byte no cookie value may hold.
func cookieText(v string) (string, bool) {
	if len(v) > 1 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c >= 0x7f || c == '"' || c == ';' || c == '\\' {
			return "", false
		}
	}
	if strings.ContainsAny(v, "%+") {
		if u, err := url.QueryUnescape(v); err == nil {
			v = u
		}
	}
	return v, true
}

// validEscapes reports whether url.QueryUnescape(v) succeeds, without
// allocating.
func validEscapes(v string) bool {
	for i := 0; i < len(v); i++ {
		if v[i] == '%' {
			if i+2 >= len(v) || !ishex(v[i+1]) || !ishex(v[i+2]) {
				return false
			}
			i += 2
		}
	}
	return true
}

// semicolonNames reports whether kv, a query pair with a ';', names name
// (or an alias) once split on ';' as Rack 2 and older Pythons split it.
func semicolonNames(kv, name string) bool {
	for kv != "" {
		var sub string
		sub, kv, _ = strings.Cut(kv, ";")
		k, _, _ := strings.Cut(sub, "=")
		if strings.ContainsAny(k, "%+") {
			u, err := url.QueryUnescape(k)
			if err != nil {
				continue
			}
			k = u
		}
		if k == name || nameAlias(k, name) {
			return true
		}
	}
	return false
}

// allSame reports whether vs holds one value, repeated: a part sent twice
// alike is read alike by every app (or as "v, v", which is nobody's).
func allSame(vs []string) bool {
	for _, v := range vs[1:] {
		if v != vs[0] {
			return false
		}
	}
	return true
}

// allSameAs reports whether every value of vs is v once read by key.
func allSameAs(vs []string, v string, key func(string) string) bool {
	for _, x := range vs {
		if key(x) != v {
			return false
		}
	}
	return true
}
