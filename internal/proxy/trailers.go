package proxy

import (
	"golang.org/x/net/http/httpguts"

	"github.com/sluicehq/sluice/internal/hop"
	"github.com/sluicehq/sluice/internal/rules"
)

// What of a trailer passes: a request's goes upstream (reverse.go:
// rewrite) without the fields dropTrailerField names, those the head goes
// without, and those a rule in force reads (ruleFields), read only when
// the request has a trailer.

// dropTrailerField reports whether the trailer field k never passes: a
// hop-by-hop field (those of hop.Is, those the message's Connection
// header names, conn, and those spelled with '_', which CGI-style
// servers read as the one they spell: underscoredHop), or one RFC 9110
// §6.5.1 keeps out of a trailer (framing, routing, authentication,
// request modifiers: httpguts.ValidTrailerHeader), which a peer that
// merges a trailer into the headers would take for the message's own.
func dropTrailerField(k string, conn hop.Names) bool {
	return hop.Is(k) || conn.Has(k) || underscoredHop(k) || !httpguts.ValidTrailerHeader(k)
}

// ruleFields appends to dst the request headers the rules of set read,
// each once: the NAME of a header:NAME key part, and Cookie for a
// cookie:NAME part. Such a field sent in a request's trailer is one no
// rule saw (the rule found the request without it, so did not apply, or
// keyed it without it): an upstream that merges its trailer into its
// headers (Apache's MergeTrailers, Tomcat's allowedTrailerHeaders) would
// take it for the request's own, an API key no limit counted. Read once
// per request that has a trailer, so that each of its fields is looked
// for among a few names, not among every rule's parts.
func ruleFields(set *rules.Set, dst []string) []string {
	if set == nil {
		return dst
	}
	for _, r := range set.Rules {
		for _, p := range r.Key {
			name := p.Name
			switch p.Kind {
			case rules.PartHeader:
			case rules.PartCookie:
				name = "Cookie"
			default:
				continue
			}
			if !fieldIn(name, dst) {
				dst = append(dst, name)
			}
		}
	}
	return dst
}

// fieldIn reports whether the header name k is one of names as a
// CGI-style server reads them (foldedEqual): X_Api_Key is X-Api-Key.
func fieldIn(k string, names []string) bool {
	for _, n := range names {
		if foldedEqual(k, n) {
			return true
		}
	}
	return false
}

// foldedEqual reports whether header names a and b are the same as a
// CGI-style server reads them: in any case, '_' as '-'.
func foldedEqual(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if foldNameByte(a[i]) != foldNameByte(b[i]) {
			return false
		}
	}
	return true
}

func foldNameByte(c byte) byte {
	switch {
	case c == '_':
		return '-'
	case 'A' <= c && c <= 'Z':
		return c + 'a' - 'A'
	}
	return c
}
