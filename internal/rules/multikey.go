package rules

import (
	"net/http"
	"net/netip"
	"slices"
	"strings"
)

// MaxKeysPerRule bounds the keys one request is counted under by one rule
// when it sends a key part with several values (Set.Match): more values,
// or more combinations of the values of several parts, are refused as
// ambiguous. Browsers send a cookie name twice or three times (for
// different paths or domains); nobody needs more.
const MaxKeysPerRule = 4

// multiValued is keyFor's amb for a request that sends a key part with
// several values.
var multiValued Part

// appendKeys appends a Match of r to dst for each combination of the
// values req sends for r's key parts (keyFor found a part with several;
// a method part's values are the readings in methods),
// in a row; or returns the part that takes the count past MaxKeysPerRule.
// A part whose values are all empty is missing: r does not apply. Only
// this rare request allocates.
func (r *Rule) appendKeys(dst []Match, req *http.Request, ip netip.Addr, path string, rp *reqPath, methods []string) ([]Match, *Part) {
	vals := make([][]string, len(r.Key))
	n := 1
	for i := range r.Key {
		p := &r.Key[i]
		var vs []string
		switch p.Kind {
		case PartIP:
			var ipb [48]byte
			vs = []string{string(r.ip.AppendKey(ipb[:0], ip))}
		case PartHeader:
			if p.Name == "Host" {
				vs = []string{HostKey(req.Host)}
				break
			}
			for _, v := range req.Header[p.Name] {
				if !authorizationHeader(p.Name) {
					vs = addValue(vs, v)
					continue
				}
				vs = addValue(vs, AuthorizationKey(v))
				if w, ok := urlSafeAuthorizationKey(v); ok {
					vs = addValue(vs, w)
				}
			}
		case PartQuery:
			vs = queryValues(req.URL.RawQuery, p.Name)
		case PartCookie:
			// Read part by part, as cookieValue: net/http's
			// CookiesNamed finds none past its cap (cookiePart).
			for _, line := range req.Header["Cookie"] {
				for line != "" {
					var part string
					part, line, _ = strings.Cut(line, ";")
					if _, v, named := cookiePart(part, p.Name); named {
						vs = addValue(vs, v)
					}
				}
			}
		case PartMethod:
			for _, m := range methods {
				vs = addValue(vs, methodKey(m))
			}
		case PartPath:
			vs = []string{path}
		}
		vs = slices.DeleteFunc(vs, func(v string) bool { return v == "" }) // queryValue's
		if len(vs) == 0 {
			return dst, nil // missing: r does not apply
		}
		if n *= len(vs); n > MaxKeysPerRule {
			return dst, p
		}
		vals[i] = vs
	}
	single := len(r.Key) == 1
	idx := make([]int, len(r.Key))
	for range n {
		var b []byte
		for i, vs := range vals {
			b = appendValue(b, vs[idx[i]], single)
		}
		dst = append(dst, Match{Rule: r, Key: r.head(b)})
		for i := len(idx) - 1; i >= 0; i-- { // the next combination
			if idx[i]++; idx[i] < len(vals[i]) {
				break
			}
			idx[i] = 0
		}
	}
	return dst, nil
}

// addValue appends v to the distinct values vs of a key part unless it is
// there already or empty (no key), or vs holds more than MaxKeysPerRule
// already (the part is refused as too many): a look through at most that
// many for each value, so that a request sending very many takes time in
// proportion to them, not to their square.
func addValue(vs []string, v string) []string {
	if v == "" || len(vs) > MaxKeysPerRule || slices.Contains(vs, v) {
		return vs
	}
	return append(vs, v)
}

// queryValues returns the different values of query parameter name in
// the raw query raw, read up to a '#' (as Node, Puma and nginx read it)
// and, when there is one, on past it (as Go and PHP read it), the former
// first; at most MaxKeysPerRule+1 of them (addValue).
func queryValues(raw, name string) []string {
	q, _, frag := strings.Cut(raw, "#")
	var vs []string
	queryValue(q, name, &vs)
	if frag {
		queryValue(raw, name, &vs)
	}
	return vs
}
