package rules

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// CanonicalPath returns the form of the URL path p that rules match and the
// path key part counts, so that a rule cannot be sidestepped by spelling a
// path differently. p is a request's URL path, encoded or decoded (the
// result is the same):
//
//   - percent-encoding is decoded until none is left ("%6C" and "%256C"
//     both become "l"; "%2F" becomes "/"); an invalid escape stays as it is;
//   - a backslash counts as a slash (as on Windows servers);
//   - ";parameters" are removed from each segment ("/login;jsessionid=1",
//     "/a;x/b", and "..;" which some servers read as "..");
//   - "." and ".." segments are resolved (".." at the root stays at the root);
//   - repeated slashes are merged and a trailing slash is removed ("/" stays).
//
// The result always starts with "/". It is idempotent: CanonicalPath of a
// canonical path is that path. An already canonical p is returned without
// allocating. The request forwarded upstream is not changed: its path is
// exactly as the client sent it.
func CanonicalPath(p string) string {
	if isCanonical(p, false) {
		return p
	}
	return canonicalSlow(p, false)
}

// FoldedPath is CanonicalPath with case folded, for rules with
// match.case_insensitive: ASCII letters become lower case, and every other
// letter becomes the lower case of the smallest of the letters that fold to
// it under Unicode simple case folding (so "É" and "é", the Kelvin sign "K"
// and "k", the long s "ſ" and "s" fold together). Bytes that are not valid UTF-8 stay as they are.
func FoldedPath(p string) string {
	if isCanonical(p, true) {
		return p
	}
	return canonicalSlow(p, true)
}

// isCanonical reports whether p is its own canonical form, in one pass
// without allocating.
func isCanonical(p string, fold bool) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	if p == "/" {
		return true
	}
	if p[len(p)-1] == '/' {
		return false
	}
	segStart := 1 // index of the current segment's first byte
	for i := 1; i <= len(p); i++ {
		if i == len(p) || p[i] == '/' {
			seg := p[segStart:i]
			if seg == "" || seg == "." || seg == ".." {
				return false
			}
			segStart = i + 1
			continue
		}
		c := p[i]
		switch {
		case c == '%', c == ';', c == '\\':
			return false
		case fold && (c >= 'A' && c <= 'Z' || c >= utf8.RuneSelf):
			return false
		}
	}
	return true
}

// canonicalSlow builds the canonical form of p step by step.
func canonicalSlow(p string, fold bool) string {
	b := percentDecode(p)
	// Segments, with ";parameters" cut, dot segments resolved and empty
	// segments dropped. out holds "/seg/seg…" built so far, no segment
	// holding a '/': ".." cuts it at its last one (each byte is cut at
	// most once, and no list of where segments start grows with the
	// path: 8 bytes a segment, for a path of a megabyte of "/a").
	out := make([]byte, 0, len(b)+1)
	for i := 0; i <= len(b); {
		j := i
		for j < len(b) && b[j] != '/' && b[j] != '\\' {
			j++
		}
		seg := b[i:j]
		if k := indexByte(seg, ';'); k >= 0 {
			seg = seg[:k]
		}
		switch string(seg) {
		case "", ".":
		case "..":
			out = out[:max(lastSlash(out), 0)]
		default:
			out = append(out, '/')
			if fold {
				out = appendFolded(out, seg)
			} else {
				out = append(out, seg...)
			}
		}
		i = j + 1
	}
	if len(out) == 0 {
		return "/"
	}
	return string(out)
}

// lastSlash returns the index of the last '/' in b, or -1.
func lastSlash(b []byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '/' {
			return i
		}
	}
	return -1
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

// percentDecode decodes %XX escapes in p until none is left, in one pass:
// after each byte is written, an escape that now ends the output (because
// decoding produced its "%" or a hex digit) is decoded in turn. A %XX never
// overlaps another, so the result is the one repeated decoding would reach.
func percentDecode(p string) []byte {
	out := make([]byte, 0, len(p))
	for i := 0; i < len(p); i++ {
		out = append(out, p[i])
		for n := len(out); n >= 3 && out[n-3] == '%' && ishex(out[n-2]) && ishex(out[n-1]); n = len(out) {
			c := unhex(out[n-2])<<4 | unhex(out[n-1])
			out = append(out[:n-3], c)
		}
	}
	return out
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// appendFolded appends seg to out with its letters folded as FoldedPath
// documents.
func appendFolded(out, seg []byte) []byte {
	for i := 0; i < len(seg); {
		c := seg[i]
		if c < utf8.RuneSelf {
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			out = append(out, c)
			i++
			continue
		}
		r, size := utf8.DecodeRune(seg[i:])
		if r == utf8.RuneError && size == 1 {
			out = append(out, c)
			i++
			continue
		}
		out = utf8.AppendRune(out, foldRune(r))
		i += size
	}
	return out
}

// foldRune returns the representative of r's simple case folding orbit:
// its smallest member, in lower case.
func foldRune(r rune) rune {
	m := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		if f < m {
			m = f
		}
	}
	return unicode.ToLower(m)
}

// joinPrefix returns the base a prefix rule "/x/*" compares against, from
// the canonical form c of "/x": "/x/", or "/" for "/*".
func joinPrefix(c string) string {
	if c == "/" {
		return c
	}
	return c + "/"
}

// hasDotSegment reports whether p has a "." or ".." segment.
func hasDotSegment(p string) bool {
	for _, s := range strings.Split(p, "/") {
		if s == "." || s == ".." {
			return true
		}
	}
	return false
}

// segmentView returns the escaped URL path p as servers that route on the
// path as sent see it, segment by segment (Go's ServeMux, Node's http and
// Express, Envoy by default): split at '/' only, empty segments dropped,
// "." and ".." kept as segments, each segment percent-decoded once, with a
// decoded '/' written "%2F" so that it stays within its segment; case
// folded with fold. Such a server routes /api/%2E%2E/x, /api/..%2Fx and
// /api/../x under /api/, where CanonicalPath sees /x: a rule matches if
// either view does. ok false: p has no escape and no dot segment, so this
// view tells nothing CanonicalPath's does not (';' and '\' are what else
// CanonicalPath reads: /api/..; is /api/.. to it, so /, and a segment
// "..;" to these servers).
func segmentView(p string, fold bool) (v string, ok bool) {
	if strings.IndexAny(p, "%;\\") < 0 && !dotSegment(p) {
		return "", false
	}
	// Segment by segment as they come, decoded into one scratch slice:
	// no list of the segments and no copy of each (a path of a megabyte
	// of "/./" took 15 times its size so).
	out := make([]byte, 0, len(p)+1)
	var dec []byte
	for seg := range strings.SplitSeq(p, "/") {
		if seg == "" {
			continue
		}
		out = append(out, '/')
		dec = dec[:0]
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			if c == '%' && i+2 < len(seg) && ishex(seg[i+1]) && ishex(seg[i+2]) {
				c = unhex(seg[i+1])<<4 | unhex(seg[i+2])
				i += 2
				if c == '/' {
					dec = append(dec, "%2F"...)
					continue
				}
			}
			dec = append(dec, c)
		}
		if fold {
			out = appendFolded(out, dec)
		} else {
			out = append(out, dec...)
		}
	}
	if len(out) == 0 {
		return "/", true
	}
	return string(out), true
}

// dotSegment reports whether p has a "." or ".." segment, without
// allocating.
func dotSegment(p string) bool {
	for i := 0; i < len(p); i++ {
		if p[i] != '.' || i > 0 && p[i-1] != '/' {
			continue
		}
		j := i + 1
		if j < len(p) && p[j] == '.' {
			j++
		}
		if j == len(p) || p[j] == '/' {
			return true
		}
	}
	return false
}
