// Package clientip finds the address of the client behind a request,
// trusting X-Forwarded-For and Forwarded (RFC 7239) only when the
// connection comes from a trusted proxy.
package clientip

import (
	"net/http"
	"net/netip"
)

// Resolver finds client addresses. Trusted lists the proxies whose
// forwarding headers are believed. The zero value trusts nobody and
// returns the connection's address. A Resolver is safe for concurrent use.
type Resolver struct {
	Trusted []netip.Prefix
}

// ClientIP returns the address of the client that sent req, or the zero
// Addr when there is none (req.RemoteAddr unparsable).
func (r Resolver) ClientIP(req *http.Request) netip.Addr {
	// TODO
	return netip.Addr{}
}
