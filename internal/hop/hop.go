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

// Drop removes h's hop-by-hop headers: those its Connection names, and
// the fixed ones (Is).
func Drop(h http.Header) {
	conn := h["Connection"]
	for k := range h {
		if Is(k) || len(conn) > 0 && Named(conn, k) {
			delete(h, k)
		}
	}
}
