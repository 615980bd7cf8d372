// Package hop names HTTP/1.1's hop-by-hop headers (RFC 9110 §7.6.1): the
// headers of one connection, which a proxy drops instead of passing them
// on. They are a fixed set and whatever a Connection header names. The
// proxy drops them from what it forwards in both directions; the deferral
// queue drops them from what it stores and replays.
package hop

import (
	"net/http"
	"net/textproto"
	"strings"
)

// Is reports whether the canonical header name k is one of the fixed
// hop-by-hop headers: those net/http's ReverseProxy drops, and
// HTTP2-Settings, which belongs to the connection an Upgrade to h2c would
// make (RFC 7540 §3.2.1), so that no upgrade to HTTP/2 is passed on.
func Is(k string) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
		"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
		"Http2-Settings":
		return true
	}
	return false
}

// Named reports whether the Connection header values cv name k, in any
// case.
func Named(cv []string, k string) bool {
	for _, v := range cv {
		for f := range strings.SplitSeq(v, ",") {
			if f = textproto.TrimString(f); f != "" && strings.EqualFold(f, k) {
				return true
			}
		}
	}
	return false
}

// Names is the set of header names a message's Connection values name,
// made once per message (NewNames) so that checking each of its headers
// (Has) takes time that does not grow with the number of names: Named
// looks through them all for each header, and a client can write tens of
// thousands of them (the checks of a header of a megabyte, each header
// named, then took a minute). The zero Names holds no name.
type Names struct {
	cv  []string            // few names (fewNames): looked through, as Named
	set map[string]struct{} // more: their ASCII lower-case forms
}

// fewNames is how many comma-separated fields Names looks through for
// each header without making a set (none allocated: Connection:
// keep-alive, close, upgrade and the like).
const fewNames = 8

// NewNames returns the names the Connection values cv name. The set grows
// with the different names only, and a name is copied into it only when
// it is new: a client may list one name hundreds of thousands of times
// (a set sized for the fields, each copied as its canonical form, took
// 13 bytes for each byte of such a header).
func NewNames(cv []string) Names {
	fields := 0
	for _, v := range cv {
		fields += strings.Count(v, ",") + 1
	}
	if fields <= fewNames {
		return Names{cv: cv}
	}
	set := make(map[string]struct{})
	var low []byte
	for _, v := range cv {
		for f := range strings.SplitSeq(v, ",") {
			if f = textproto.TrimString(f); f != "" {
				low = appendLower(low[:0], f)
				if _, ok := set[string(low)]; !ok {
					set[string(low)] = struct{}{}
				}
			}
		}
	}
	return Names{set: set}
}

// Has reports whether the names hold the canonical header name k, in any
// case (as Named does, for ASCII names: a header name is ASCII).
func (n Names) Has(k string) bool {
	if n.set != nil {
		var buf [64]byte
		_, ok := n.set[string(appendLower(buf[:0], k))]
		return ok
	}
	return len(n.cv) > 0 && Named(n.cv, k)
}

// appendLower appends s to b with its ASCII letters in lower case.
func appendLower(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	return b
}

// Drop removes h's hop-by-hop headers: those its Connection names, and
// the fixed ones (Is).
func Drop(h http.Header) {
	names := NewNames(h["Connection"])
	for k := range h {
		if Is(k) || names.Has(k) {
			delete(h, k)
		}
	}
}

// SameName reports whether header names a and b are one header as a
// CGI-style server reads names (RFC 3875 §4.1.18: upper-cased, '-' as
// '_'): in any case, '_' for '-'. Such a server reads Transfer_Encoding
// as Transfer-Encoding and X_Api_Key as X-Api-Key, so a name dropped or
// keyed on must be matched in all its spellings.
func SameName(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if cgiFold(a[i]) != cgiFold(b[i]) {
			return false
		}
	}
	return true
}

func cgiFold(c byte) byte {
	switch {
	case c == '_':
		return '-'
	case 'A' <= c && c <= 'Z':
		return c + 'a' - 'A'
	}
	return c
}
