package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// MaxKeyLen bounds the request-derived part of a store key: a longer one is
// replaced by "#" and the hex SHA-256 of it, so a huge header value is never
// stored raw. The whole key is at most MaxNameLen + 11 + MaxKeyLen bytes
// (name, "|", an 8-digit fingerprint, "|", and a raw value that starts
// with "#" gets a second "#"); a Redis key holds it escaped, so up to
// about twice that when the value is all "}" or "\".
const MaxKeyLen = 256

// Matches reports whether the rule applies to a request with this method
// and URL path (encoded or decoded, without the query).
//
// Methods compare case-insensitively; an empty list matches any method.
// GET also matches HEAD, as in Go's ServeMux and nginx's limit_except:
// servers answer HEAD with GET's handler, so a GET rule that let HEAD by
// would leave the same work unlimited.
// The path is compared in its canonical form (see CanonicalPath), so
// "/login/", "/login;x", "/%6Cogin", "//login" and "/a/../login" all match
// a rule for "/login"; with match.case_insensitive, case is folded too
// (FoldedPath). An exact path matches only itself; a prefix "/api/*"
// matches "/api" and everything under "/api/", but not "/apix". No path
// matches every path. A path also matches as servers that route on the
// path as sent see it (segmentView): "/api/%2E%2E/x" and "/api/../x" are
// under "/api/*" for them, though their canonical form is "/x".
func (r *Rule) Matches(method, path string) bool {
	if r.matches(method, r.canonical(path)) {
		return true
	}
	v, ok := segmentView(path, r.Fold)
	return ok && r.matches(method, v)
}

// canonical returns the form of path r compares.
func (r *Rule) canonical(path string) string {
	if r.Fold {
		return FoldedPath(path)
	}
	return CanonicalPath(path)
}

func (r *Rule) matches(method, p string) bool {
	return r.matchesMethod(method) && r.matchesPath(p)
}

// matchesMethod reports whether r applies to a request with this method.
func (r *Rule) matchesMethod(method string) bool {
	if len(r.Methods) == 0 {
		return true
	}
	for _, m := range r.Methods {
		if strings.EqualFold(m, method) || m == http.MethodGet && strings.EqualFold(method, http.MethodHead) {
			return true
		}
	}
	return false
}

// matchesPath reports whether r applies to a request with the path p (in
// the form r compares).
func (r *Rule) matchesPath(p string) bool {
	switch {
	case r.Path == "":
		return true
	case !r.prefix:
		return p == r.base
	}
	return strings.HasPrefix(p, r.base) || p == r.base[:len(r.base)-1]
}

// reqPath holds a request's canonical path, and its folded form once a
// case-insensitive rule asks for it; and its segment view (segmentView,
// folded or not) once a rule the canonical form does not match asks.
type reqPath struct {
	raw, canon, folded string
	url                *url.URL
	seg                [2]string // [fold]; "": none (nothing to add)
	segMade            [2]bool
	under              int8 // a header name has a '_' (underscored): 0 not known yet, 1 no, 2 yes
	// The readings of the request's method (override.go: methods): its
	// own, then the ones a POST's overrides name; nm counts them, 0
	// before they are read, MaxKeysPerRule+1 when there are more.
	ms [MaxKeysPerRule]string
	nm int8
}

func newReqPath(req *http.Request) reqPath {
	raw := "/"
	if req.URL != nil {
		raw = req.URL.Path
	}
	return reqPath{raw: raw, canon: CanonicalPath(raw), url: req.URL}
}

// segmentOf returns the segment view rule r compares, or "" when it
// tells nothing the canonical form does not.
func (p *reqPath) segmentOf(r *Rule) string {
	i := 0
	if r.Fold {
		i = 1
	}
	// An escape that changes the segments sets RawPath (url.URL); a dot
	// segment is in Path as it came, and so are ';' and '\', which
	// CanonicalPath reads and these servers do not.
	if !p.segMade[i] && p.url != nil && (p.url.RawPath != "" || dotSegment(p.url.Path) || strings.ContainsAny(p.url.Path, ";\\")) {
		p.seg[i], _ = segmentView(p.url.EscapedPath(), r.Fold)
	}
	p.segMade[i] = true
	return p.seg[i]
}

// of returns the form of the path rule r compares.
func (p *reqPath) of(r *Rule) string {
	if !r.Fold {
		return p.canon
	}
	if p.folded == "" {
		p.folded = FoldedPath(p.canon)
	}
	return p.folded
}

// Match appends to dst every rule of s that applies to req, in file order,
// with the store key req is counted under, and returns the extended slice.
// A rule whose key part is missing from req does not apply. A rule whose
// header, query or cookie part req sends more than once with different
// values applies once per value (per combination, with several such
// parts; at most MaxKeysPerRule), each Match in a row: an app behind may
// read any one of them, and req is counted under each, so no choice of
// values escapes the limit. A POST that names other methods in a
// method-override header or the query's _method (override.go) is matched
// under each reading of its method, and counted under each its rules'
// method key parts take (as a part with several values); more than
// MaxKeysPerRule readings are ambiguous to a rule that lists methods or
// is keyed by method. A rule whose key part is ambiguous in req (see
// AmbiguousKeyError) stops the match with a *AmbiguousKeyError: refuse
// req, count nothing. Pass a reused dst[:0] to avoid allocating.
func (s *Set) Match(req *http.Request, clientIP netip.Addr, dst []Match) ([]Match, error) {
	if s == nil {
		return dst, nil
	}
	p := newReqPath(req)
	for _, r := range s.Rules {
		rp := p.of(r)
		var sel [MaxKeysPerRule]string
		sel[0] = req.Method
		methods := sel[:1] // the readings r applies under
		if readings, tooMany := p.methodsFor(r, req); len(readings) > 1 || tooMany {
			if !r.matchesPath(rp) {
				if v := p.segmentOf(r); v == "" || !r.matchesPath(v) {
					continue
				}
			}
			if tooMany {
				return dst, &AmbiguousKeyError{Rule: r, Part: Part{Kind: PartMethod}, TooMany: true}
			}
			methods = sel[:0]
			for _, m := range readings {
				if r.matchesMethod(m) {
					methods = append(methods, m)
				}
			}
			if len(methods) == 0 {
				continue
			}
		} else if !r.matches(req.Method, rp) {
			if v := p.segmentOf(r); v == "" || !r.matches(req.Method, v) {
				continue
			}
		}
		k, amb, ok := r.keyFor(req, clientIP, rp, &p, methods)
		if amb == &multiValued {
			var tooMany *Part
			if dst, tooMany = r.appendKeys(dst, req, clientIP, rp, &p, methods); tooMany != nil {
				return dst, &AmbiguousKeyError{Rule: r, Part: *tooMany, TooMany: true}
			}
			continue
		}
		if amb != nil {
			return dst, &AmbiguousKeyError{Rule: r, Part: *amb}
		}
		if ok {
			dst = append(dst, Match{Rule: r, Key: k})
		}
	}
	return dst, nil
}

// UnixClient is the client address of a request whose client is the
// peer of a Unix socket, which has no address (its gateway's
// X-Forwarded-For not believed, or none sent): its ip key is "unix:", one
// count for every such client, as nginx's $remote_addr is "unix:". No
// address a request carries has a zone, so none is taken for it.
var UnixClient = netip.IPv6Unspecified().WithZone("unix")

// unixKey is UnixClient's ip key.
const unixKey = "unix:"

// KeyFor returns the store key req is counted under by r, or ok=false when
// a key part is missing and r does not apply to req: an invalid clientIP
// for ip, no such header, query parameter or cookie, or an empty value
// (which counts as missing); or an ambiguous part (see AmbiguousKeyError,
// which Set.Match reports); or a part sent with several values (Set.Match
// counts each). KeyFor does not check Matches.
//
// The key is "NAME|FINGERPRINT|VALUE". With one key part VALUE is the raw
// value (so POST /v1/check with the same key counts the same counter, see
// StoreKey); with several, each value is written as LENGTH:VALUE, so no
// value can imitate a boundary. Header, query and cookie values are taken
// as the first one sent (a query up to a raw '#', which starts a fragment
// for most servers); ip is the client's prefix as clientip.Prefixes
// writes it (by default the IPv4 address, or the IPv6 /64 such as
// "2001:db8:1:2::/64"; IPv4-mapped IPv6 counts as IPv4), or "unix:" for
// UnixClient. A VALUE
// longer than MaxKeyLen becomes "#" and its SHA-256 in hex; a raw value
// that itself starts with "#" gets a second "#".
func (r *Rule) KeyFor(req *http.Request, clientIP netip.Addr) (key string, ok bool) {
	p := newReqPath(req)
	key, amb, ok := r.keyFor(req, clientIP, p.of(r), &p, []string{req.Method})
	return key, ok && amb == nil
}

// keyFor returns the key of req, ok=false when a part is missing, or the
// part that is ambiguous (amb, with ok=false); amb is &multiValued when a
// part is sent with several values (appendKeys makes the keys then),
// methods included: the readings of req's method r applies under (one
// or more; Set.Match). rp holds what is scanned of req once for all
// rules.
func (r *Rule) keyFor(req *http.Request, ip netip.Addr, path string, rp *reqPath, methods []string) (key string, amb *Part, ok bool) {
	var buf [128]byte
	b := buf[:0]
	single := len(r.Key) == 1
	multi := false
	for i := range r.Key {
		p := &r.Key[i]
		var v string
		var ipb [48]byte
		switch p.Kind {
		case PartIP:
			if !ip.IsValid() {
				return "", nil, false
			}
			var ipv []byte
			if ip == UnixClient {
				ipv = append(ipb[:0], unixKey...)
			} else {
				ipv = r.ip.AppendKey(ipb[:0], ip)
			}
			if !single {
				b = strconv.AppendInt(b, int64(len(ipv)), 10)
				b = append(b, ':')
			}
			b = append(b, ipv...)
			continue
		case PartHeader:
			if p.Name == "Host" { // net/http moves it out of Header
				v = HostKey(req.Host)
				break
			}
			vs := req.Header[p.Name]
			if (rp.underscored(req.Header) || strings.IndexByte(p.Name, '_') >= 0) && headerAlias(req.Header, p.Name) {
				return "", p, false
			}
			if len(vs) == 0 {
				return "", nil, false
			}
			if len(vs) > 1 && !allSame(vs) {
				multi = true
			}
			v = vs[0]
			if authorizationHeader(p.Name) {
				// One credential under several spellings is one value;
				// one that Node reads as another (URL-safe base64) is
				// counted under each.
				v = AuthorizationKey(v)
				multi = multi && !allSameAs(vs, v, AuthorizationKey)
				for i := 0; i < len(vs) && !multi; i++ {
					_, multi = urlSafeAuthorizationKey(vs[i])
				}
			}
		case PartQuery:
			if req.URL == nil {
				return "", nil, false
			}
			// A raw '#' starts a fragment for some servers behind (Node,
			// Express, Puma and nginx read ?k=v#1 as k=v), so a fresh
			// fragment must not make a fresh key; others read on past it
			// (Go reads ?x=1#&k=v as k=v, PHP through Caddy's
			// php_fastcgi too): a query with a '#' is read both ways,
			// and counted under each value either finds (queryValues).
			raw := req.URL.RawQuery
			q, _, frag := strings.Cut(raw, "#")
			var bad, more bool
			if v, more, bad = queryValue(q, p.Name, nil); bad {
				return "", p, false
			}
			if frag {
				w, wmore, wbad := queryValue(raw, p.Name, nil)
				if wbad {
					return "", p, false
				}
				more = more || wmore || w != v
			}
			multi = multi || more
		case PartCookie:
			var found, more, bad bool
			if v, found, more, bad = cookieValue(req, p.Name); bad {
				return "", p, false
			} else if !found {
				return "", nil, false
			}
			multi = multi || more
		case PartMethod:
			v = methodKey(methods[0])
			for _, m := range methods[1:] {
				multi = multi || methodKey(m) != v
			}
		case PartPath:
			v = path
		}
		if v == "" && !multi {
			return "", nil, false
		}
		b = appendValue(b, v, single)
	}
	if multi {
		return "", &multiValued, false
	}
	return r.head(b), nil, true
}

// methodKey is the value of a method key part: the method in upper case,
// HEAD as GET. A GET rule applies to HEAD because servers answer it with
// the GET handler, the same work; counted under a key of its own, HEAD
// would double a client's allowance of it.
func methodKey(m string) string {
	if strings.EqualFold(m, http.MethodHead) {
		return http.MethodGet
	}
	return strings.ToUpper(m)
}

// appendValue appends a key part's value v to the key b: as it is for a
// rule keyed on one part (single), else as LENGTH:VALUE.
func appendValue(b []byte, v string, single bool) []byte {
	if !single {
		b = strconv.AppendInt(b, int64(len(v)), 10)
		b = append(b, ':')
	}
	return append(b, v...)
}

// StoreKey returns the store key for a key given by a caller (POST
// /v1/check): "NAME|FINGERPRINT|KEY", with a KEY longer than MaxKeyLen
// hashed as KeyFor does. For a rule with one key part, StoreKey(v) is the
// key KeyFor gives a request whose part has the value v. For a rule keyed
// by ip alone, a KEY that is an IP address is that client's, counted as
// KeyFor counts it: by the rule's prefix (an IPv6 address by its /64),
// without a zone, an IPv4-mapped address as IPv4, whatever its spelling;
// and so is a prefix the rule's or narrower ("2001:db8:1:2::/64", as
// KeyFor writes the key). Counted as written, each address of one host's
// /64 was a fresh count. Any other KEY is taken as it is.
//
// The other parts a rule's one key part can be that have spellings are
// read as a request's are, so that a gateway passing each request's value
// on shares the count of requests with it, and a client spelling it
// another way gets no fresh count: a path ("/"…) in its canonical form
// (case folded for a case_insensitive rule), a Host as HostKey writes it,
// a method as the method part counts it (upper case, HEAD as GET), an
// Authorization (or Proxy-Authorization) value as AuthorizationKey does,
// a query parameter's value with its escapes decoded ('+' as a space), a
// cookie's as cookiePart reads it (blanks at its end trimmed, double
// quotes stripped, escapes decoded). Such a key is read as the request sent it (nginx's $arg_NAME
// and $cookie_NAME): one that does not decode is taken as written, and a
// value passed on already decoded is decoded again, which changes only
// one holding a '%' or '+'.
func (r *Rule) StoreKey(key string) string {
	if len(r.Key) == 1 {
		switch p := r.Key[0]; {
		case p.Kind == PartIP:
			var ipb [48]byte
			if v, ok := r.addrKey(ipb[:0], key); ok {
				return r.head(v)
			}
		case p.Kind == PartPath && strings.HasPrefix(key, "/"):
			key = r.canonical(key)
		case p.Kind == PartMethod:
			key = methodKey(key)
		case p.Kind == PartHeader && p.Name == "Host":
			key = HostKey(key)
		case p.Kind == PartHeader && authorizationHeader(p.Name):
			key = AuthorizationKey(key)
		case p.Kind == PartQuery && strings.ContainsAny(key, "%+"):
			if v, err := url.QueryUnescape(key); err == nil {
				key = v
			}
		case p.Kind == PartCookie:
			// Trimmed at the end, as a Cookie header's part is.
			if v, ok := cookieText(strings.TrimRight(key, " \t\r\n")); ok && v != "" {
				key = v
			}
		}
	}
	return r.head([]byte(key))
}

// addrKey appends to b the ip key of the client address or prefix s, as
// KeyFor writes it, or reports false when s is neither, or a prefix wider
// than the rule counts (it names no one client).
func (r *Rule) addrKey(b []byte, s string) ([]byte, bool) {
	if strings.IndexByte(s, '.') < 0 && strings.IndexByte(s, ':') < 0 {
		// Neither an IPv4 nor an IPv6 address, nor a prefix of one:
		// both parses would fail, each allocating its error, on every
		// decision for a key that is a name ("k123").
		return b, false
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return r.ip.AppendKey(b, a), true
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return b, false
	}
	a := p.Addr().Unmap()
	bits := p.Bits()
	if p.Addr().Is4In6() {
		bits -= 96
	}
	if bits < r.ip.Bits(a) {
		return b, false
	}
	return r.ip.AppendKey(b, a), true
}

// head bounds the value v and prefixes it with the rule's name and
// fingerprint.
func (r *Rule) head(v []byte) string {
	var sb strings.Builder
	switch {
	case len(v) > MaxKeyLen:
		sum := sha256.Sum256(v)
		sb.Grow(len(r.keyHead) + 1 + 2*len(sum))
		sb.WriteString(r.keyHead)
		sb.WriteByte('#')
		var hx [2 * sha256.Size]byte
		hex.Encode(hx[:], sum[:])
		sb.Write(hx[:])
	case len(v) > 0 && v[0] == '#':
		sb.Grow(len(r.keyHead) + 1 + len(v))
		sb.WriteString(r.keyHead)
		sb.WriteByte('#')
		sb.Write(v)
	default:
		sb.Grow(len(r.keyHead) + len(v))
		sb.WriteString(r.keyHead)
		sb.Write(v)
	}
	return sb.String()
}
