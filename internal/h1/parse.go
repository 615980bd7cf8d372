package h1

import (
	"bufio"
	"bytes"
	"net/http"
	"net/url"
	"strings"
	"unsafe"
)

// The strict parser of the fast front. It accepts only the simple subset
// of HTTP/1.x requests — GET or HEAD, HTTP/1.1 or HTTP/1.0, an
// origin-form target, no body and nothing that could announce one
// (Content-Length, Transfer-Encoding) — or, where the server takes bodies
// (Server.MaxBody), POST with at most one Content-Length of plain digits
// within that bound and no Transfer-Encoding — no Upgrade or Expect, no Pragma
// (net/http rewrites it), every line ending in CRLF, no folded lines,
// header names of token characters and values of visible characters,
// spaces and tabs, one well-formed Host (HTTP/1.1 requires it) — and
// builds from it the http.Request net/http's server would build. Anything
// else, or anything doubtful, is refused (ok false) and the connection is
// handed to net/http with the bytes read so far, so that net/http's own
// answer (400, 431, 505, a body, an upgrade) is given unchanged. Fuzzed
// against http.ReadRequest (fuzz_test.go).

// maxHead bounds a request head on the fast front: a longer one is handed
// off, so net/http applies its own limit (MaxHeaderBytes) and answer.
const maxHead = 8 << 10

// readHead returns the next complete request head at the front of br
// (ending in CRLFCRLF), without consuming it. handoff reports a head the
// fast parser will not take (a bare LF, or longer than br's buffer); err a
// read error, with partial telling whether some bytes of a request came
// before it.
func readHead(br *bufio.Reader) (head []byte, handoff, partial bool, err error) {
	scanned := 0
	for {
		buf, _ := br.Peek(br.Buffered())
		switch end := headEnd(buf, scanned); {
		case end < 0:
			return nil, true, true, nil
		case end > 0:
			return buf[:end], false, true, nil
		}
		scanned = len(buf)
		if len(buf) >= br.Size() {
			return nil, true, true, nil
		}
		if _, err := br.Peek(len(buf) + 1); err != nil {
			return nil, false, br.Buffered() > 0, err
		}
	}
}

// headEnd looks in buf, from offset from on (where the LFs before have
// been looked at), for the end of a request head: the head's length
// (through its CRLFCRLF), -1 at an LF without a CR before it (the fast
// parser will not take the head), 0 when buf holds neither yet.
func headEnd(buf []byte, from int) int {
	for i := from; i < len(buf); i++ {
		nl := bytes.IndexByte(buf[i:], '\n')
		if nl < 0 {
			break
		}
		i += nl
		if i == 0 || buf[i-1] != '\r' {
			return -1
		}
		if i >= 3 && buf[i-2] == '\n' && buf[i-3] == '\r' {
			return i + 1
		}
	}
	return 0
}

// parsed is what parse makes of a head.
type parsed struct {
	method, target string
	minor          int // HTTP/1.minor
	url            *url.URL
	header         http.Header
	host           string
	close          bool  // the client asked for the connection to close after the answer
	length         int64 // the body's Content-Length (POST only; 0: no body)
	lines          int   // the header lines (request.release)
}

// request is the storage of the request a connection serves: the
// http.Request, its URL, its header map and the backing array of the
// header's values (up to 16 lines; more share one slice kept up to
// maxStrs), made once per connection and reused from request to request
// (a handler does not keep them after it returns: see the package
// documentation). A POST's body gets its own readBody each time: a
// transport may still hold the last one, closed.
type request struct {
	r     http.Request
	u     url.URL
	h     http.Header
	strs  [16]string
	more  []string
	lines []span // headString's, kept up to maxStrs
}

// maxStrs bounds the header values' backing array a connection keeps.
const maxStrs = 128

// release drops what the request refers to, so that an idle connection
// pins neither the last head nor its values.
func (rq *request) release(lines int) {
	rq.r, rq.u = http.Request{}, url.URL{}
	if len(rq.h) > 32 {
		rq.h = nil // clear costs a map's size: one grown unusually large goes
	} else {
		clear(rq.h)
	}
	if lines > len(rq.strs) {
		clear(rq.more[:min(lines, len(rq.more))])
		lines = len(rq.strs)
	}
	clear(rq.strs[:lines])
}

// parse parses a complete head (as readHead returns it) into rq (its URL,
// header map and values); ok false: not in the fast subset, hand the
// connection off. maxBody is the largest Content-Length taken (a POST's);
// 0: no POST, no body. p.lines is how many values rq holds (for release).
func parse(b []byte, rq *request, maxBody int64) (p parsed, ok bool) {
	s, reqEnd, spans := headString(b, rq.lines[:0]) // one allocation: names and values are substrings of s
	if cap(spans) <= maxStrs {
		rq.lines = spans
	}
	line := s[:reqEnd]
	switch {
	case strings.HasPrefix(line, "GET "):
		p.method, line = http.MethodGet, line[4:]
	case strings.HasPrefix(line, "HEAD "):
		p.method, line = http.MethodHead, line[5:]
	case maxBody > 0 && strings.HasPrefix(line, "POST "):
		p.method, line = http.MethodPost, line[5:]
	default:
		return p, false
	}
	sp := strings.IndexByte(line, ' ')
	if sp <= 0 || line[0] != '/' {
		return p, false
	}
	p.target = line[:sp]
	for i := 0; i < len(p.target); i++ {
		if c := p.target[i]; c <= ' ' || c >= 0x7f {
			return p, false
		}
	}
	switch line[sp+1:] {
	case "HTTP/1.1":
		p.minor = 1
	case "HTTP/1.0":
		p.minor = 0
	default:
		return p, false
	}
	if !ParseTarget(p.target, &rq.u) {
		u, err := url.ParseRequestURI(p.target)
		if err != nil {
			return p, false
		}
		rq.u = *u
	}
	p.url = &rq.u

	spans = spans[:len(spans)-1] // the last, empty line ends the head
	lines := len(spans)
	if rq.h == nil {
		rq.h = make(http.Header, lines)
	}
	p.header = rq.h
	strs := rq.strs[:] // one backing array for single values, as textproto does
	if lines > len(strs) {
		if cap(rq.more) < lines {
			if lines > maxStrs {
				strs = make([]string, lines)
			} else {
				rq.more = make([]string, max(lines, 2*len(rq.strs)))
			}
		}
		if lines <= cap(rq.more) {
			strs = rq.more[:lines]
		}
	}
	p.lines = lines
	var conn []string
	hosts, lengths := 0, 0
	for i, ln := range spans {
		if ln.colon <= ln.start {
			return p, false // no name of token characters before a colon; also a folded line (leading space or tab)
		}
		k, v := s[ln.start:ln.colon], trim(s[ln.colon+1:ln.end])
		if !validValue(v) {
			return p, false
		}
		switch k { // canonical already (headString)
		case "Content-Length":
			// One, of digits only, for a POST, within maxBody: anything
			// else (two, a list, a sign, too long) is net/http's to judge.
			if lengths++; lengths > 1 || p.method != http.MethodPost {
				return p, false
			}
			if p.length, ok = parseLength(v, maxBody); !ok {
				return p, false
			}
		case "Transfer-Encoding", "Upgrade", "Expect", "Pragma":
			return p, false
		case "Host":
			if hosts++; hosts > 1 || !validHost(v) {
				return p, false
			}
			p.host = v
			continue // net/http's server drops Host from the header map
		case "Connection":
			conn = append(conn, v)
		}
		if seenBefore(s, spans[:i], k, p.header) {
			p.header[k] = append(p.header[k], v)
		} else {
			strs[0] = v
			p.header[k] = strs[:1:1]
			strs = strs[1:]
		}
	}
	if p.minor == 1 {
		if hosts == 0 {
			return p, false // net/http answers 400
		}
		p.close = hasToken(conn, "close")
	} else {
		if hasToken(conn, "keep-alive") {
			return p, false // HTTP/1.0 keep-alive: net/http's rules
		}
		p.close = true
	}
	return p, true
}

// ParseTarget sets u to what url.ParseRequestURI makes of an origin-form
// target whose path needs no escaping and has no escapes (letters, digits
// and -._~$&+,/:;=@), the common kind, without allocating; false: another
// kind, for url.ParseRequestURI. (FuzzParse compares the two.)
func ParseTarget(t string, u *url.URL) bool {
	path, query, hasQuery := strings.Cut(t, "?")
	for i := 0; i < len(path); i++ {
		if !pathChar[path[i]] {
			return false
		}
	}
	*u = url.URL{Path: path}
	if hasQuery {
		if query == "" {
			u.ForceQuery = true // "/a?", as url.Parse
		} else {
			u.RawQuery = query
		}
	}
	return true
}

// pathChar: the bytes url.URL keeps as they are in a path (no escaping,
// so RawPath stays empty).
var pathChar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "-._~$&+,/:;=@" {
		t[c] = true
	}
	return t
}()

// parseLength parses a Content-Length value of 1 to 18 digits, at most max.
func parseLength(v string, max int64) (n int64, ok bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, n <= max
}

func trim(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// tokenChar: RFC 9110's tchar.
var tokenChar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// upperToken and lowerToken map a token character to itself in upper or
// lower case (other than letters, to itself), anything else to 0.
var upperToken, lowerToken = func() (up, low [256]byte) {
	for c := range 256 {
		if !tokenChar[c] {
			continue
		}
		up[c], low[c] = byte(c), byte(c)
		if 'a' <= c && c <= 'z' {
			up[c] = byte(c) - ('a' - 'A')
		}
		if 'A' <= c && c <= 'Z' {
			low[c] = byte(c) + ('a' - 'A')
		}
	}
	return up, low
}()

func validName(k string) bool {
	for i := 0; i < len(k); i++ {
		if !tokenChar[k[i]] {
			return false
		}
	}
	return len(k) > 0
}

// validValue: visible ASCII, space, tab and bytes >= 0x80 (obs-text).
func validValue(v string) bool {
	for ; len(v) >= 8; v = v[8:] {
		w := v[:8]
		// Eight bytes at once: a byte below 0x20 (a tab too) or 0x7f
		// is looked at alone.
		x := word(w)
		if (hasBelow(x, 0x20) || hasBelow(x^0x7f7f7f7f7f7f7f7f, 1)) && !validBytes(w) {
			return false
		}
	}
	return validBytes(v)
}

// word returns the first eight bytes of w (at least eight long) as one
// little-endian word, for the eight-bytes-at-once checks of header
// values (validValue, plainValue).
func word(w string) uint64 {
	w = w[:8] // its length known: no bounds checks below
	return uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
		uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
}

// hasBelow reports whether a byte of x is below c (at most 0x80): the
// borrow of a byte below c sets its top bit in x-c·0x0101…, which &^x
// keeps only for a byte below 0x80 to begin with.
func hasBelow(x uint64, c byte) bool {
	return (x-uint64(c)*0x0101010101010101)&^x&0x8080808080808080 != 0
}

func validBytes(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// validHost: a non-empty host[:port] of letters, digits and - . _ : [ ]
// (a subset of what net/http accepts; anything else is handed off).
func validHost(h string) bool {
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '-' || c == '.' || c == '_' || c == ':' || c == '[' || c == ']') {
			return false
		}
	}
	return len(h) > 0
}

// span is one header line of a head: the offsets of its start, of the
// colon ending its name (-1 when the name ends at a byte that is neither
// a token character nor a colon) and of the CR ending the line.
type span struct{ start, colon, end int }

// headString returns the head b as a string, with every header name in
// canonical form (textproto.CanonicalMIMEHeaderKey's: the first letter
// and each letter after a hyphen upper case, the others lower case), in
// one allocation: the names need none of their own, whatever case the
// client sends them in. The request line is kept as it is; so is a name
// with a byte that is not a token character, which parse refuses (the
// connection is then handed off with br's bytes, not these). It also
// returns where the request line ends and, appended to spans, the header
// lines (the last the empty one ending the head), found in the same
// pass. b ends in CRLF and holds no LF without a CR before it (readHead).
func headString(b []byte, spans []span) (string, int, []span) {
	buf := make([]byte, len(b))
	copy(buf, b)
	reqEnd := bytes.IndexByte(buf, '\n')
	start := reqEnd + 1
	for start < len(buf) {
		h := buf[start:]
		i, fold := 0, &upperToken
		for ; i < len(h); i++ {
			c := h[i]
			o := fold[c]
			if o == 0 { // a colon, or no token character
				break
			}
			h[i] = o
			fold = &lowerToken
			if c == '-' {
				fold = &upperToken
			}
		}
		nl := bytes.IndexByte(h[i:], '\n')
		if nl < 0 {
			break
		}
		colon := -1
		if i < len(h) && h[i] == ':' {
			colon = start + i
		}
		end := start + i + nl + 1
		spans = append(spans, span{start, colon, end - 2})
		start = end
	}
	// buf is not written again: the string is immutable, as string(b)'s.
	return unsafe.String(unsafe.SliceData(buf), len(buf)), reqEnd - 1, spans
}

// seenBefore reports whether the header lines before hold the name k
// (canonical, in s): compared by name for a head of a few lines, cheaper
// there than a lookup in h, which holds the same names.
func seenBefore(s string, before []span, k string, h http.Header) bool {
	if len(before) > 16 {
		_, seen := h[k]
		return seen
	}
	for _, ln := range before {
		if ln.colon-ln.start == len(k) && s[ln.start:ln.colon] == k {
			return true
		}
	}
	return false
}

// hasToken reports whether the comma-separated values vv hold tok (any
// case).
func hasToken(vv []string, tok string) bool {
	for _, v := range vv {
		for f := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(trim(f), tok) {
				return true
			}
		}
	}
	return false
}
