// Package clientip finds the address of the client behind a request,
// believing X-Forwarded-For and Forwarded (RFC 7239) only when the
// connection comes from a trusted proxy.
//
// The rules, in order:
//
//  1. The connection's address (http.Request.RemoteAddr) is the answer
//     unless it lies within one of the trusted prefixes. A client that is
//     not a trusted proxy can send any header it likes: it changes nothing.
//  2. From a trusted proxy, X-Forwarded-For is walked from the right (the
//     hop the proxy itself appended) to the left, skipping addresses that
//     are trusted too; the first untrusted address is the client. Several
//     X-Forwarded-For header lines count as one list, in order.
//  3. Without X-Forwarded-For, the for= parameters of the Forwarded header
//     are walked the same way, each line split into elements from the
//     right too: an element a proxy appended to a client's line after a
//     comma is read even when the client's text before it is malformed
//     (a quote left open). A request with both is read by its
//     X-Forwarded-For alone, so a trusted proxy that writes only Forwarded
//     must drop or overwrite the X-Forwarded-For a client sends:
//     otherwise that header reaches the Resolver as the client wrote it,
//     and the client picks its own address.
//  4. When the walk meets a hop it cannot read (garbage, "unknown", an
//     obfuscated identifier such as "_hidden", an element without for=),
//     it stops and answers the nearest address it knows: the last trusted
//     hop, or the connection's address. Clients behind such a hop are
//     therefore counted together rather than not at all.
//  5. When every hop is trusted, the leftmost is the answer.
//
// Addresses are returned without zone, and IPv4-mapped IPv6 addresses as
// IPv4; a trusted prefix in IPv4-mapped form (::ffff:10.0.0.0/104) trusts
// the IPv4 addresses it maps (10.0.0.0/8). ClientIP returns the full address (it is what X-Forwarded-For
// carries upstream); a rate-limit key counts a prefix of it (Prefixes): by
// default an IPv6 client's /64, since one host usually holds a whole /64.
//
// The sluice daemon and the library's httplimit.KeyByClientIP both use it:
//
//	res := clientip.Resolver{Trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
//	addr := res.ClientIP(req)               // 203.0.113.9, from X-Forwarded-For via 10.0.0.7
//	key := clientip.Prefixes{}.Key(addr)    // "203.0.113.9"; an IPv6 client: "2001:db8:1:2::/64"
package clientip

import (
	"net/http"
	"net/netip"
	"strings"
)

// Resolver finds client addresses. Trusted lists the proxies whose
// forwarding headers are believed; an IPv4 proxy may be listed in either
// form, 10.0.0.0/8 or ::ffff:10.0.0.0/104. The zero value trusts nobody and
// returns the connection's address. A Resolver is safe for concurrent use
// as long as Trusted is not modified.
type Resolver struct {
	Trusted []netip.Prefix
	// TrustUnix trusts the peers of a Unix-socket listener (IsUnixPeer),
	// as nginx's set_real_ip_from unix: does: a local process such as a
	// gateway on the same host.
	TrustUnix bool
}

// ClientIP returns the address of the client that sent req, following the
// rules of the package documentation, or the zero Addr when the address
// it finds is not an IP address: the peer of a Unix socket, which has
// none, unless TrustUnix and its headers name the client.
func (r Resolver) ClientIP(req *http.Request) netip.Addr {
	peer := parseRemote(req.RemoteAddr)
	if peer.IsValid() && !r.trusted(peer) || !peer.IsValid() && !(r.TrustUnix && IsUnixPeer(req.RemoteAddr)) {
		return peer
	}
	// The keys in canonical form: indexing skips Header.Values'
	// canonicalizing per request.
	if xff := req.Header["X-Forwarded-For"]; len(xff) > 0 {
		return r.walkXFF(xff, peer)
	}
	if fwd := req.Header["Forwarded"]; len(fwd) > 0 {
		return r.walkForwarded(fwd, peer)
	}
	return peer
}

// Trusts reports whether req comes from a trusted proxy: its connection's
// address (http.Request.RemoteAddr) lies within Trusted. The headers
// such a proxy sets may be believed; any other peer's may say anything.
func (r Resolver) Trusts(req *http.Request) bool {
	peer := parseRemote(req.RemoteAddr)
	if !peer.IsValid() {
		return r.TrustUnix && IsUnixPeer(req.RemoteAddr)
	}
	return r.trusted(peer)
}

// IsUnixPeer reports whether remote, an http.Request's RemoteAddr, is
// the peer of a Unix-socket connection: "@" for an unnamed one (as
// gateways connect), else the path of the socket it bound.
func IsUnixPeer(remote string) bool {
	return remote != "" && (remote[0] == '@' || remote[0] == '/')
}

// trusted reports whether a lies within a trusted prefix. a is unmapped
// (see normalize), so an IPv4 address also matches a prefix written in
// IPv4-mapped form, ::ffff:10.0.0.0/104, as the IPv4 prefix it stands for
// (10.0.0.0/8); an IPv6 prefix that merely covers the mapped range, such
// as ::/0, does not make IPv4 addresses trusted.
func (r Resolver) trusted(a netip.Addr) bool {
	for _, p := range r.Trusted {
		if p.Contains(a) {
			return true
		}
	}
	if a.Is4() {
		for _, p := range r.Trusted {
			if p.Addr().Is4In6() && p.Bits() >= 96 && netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96).Contains(a) {
				return true
			}
		}
	}
	return false
}

func (r Resolver) walkXFF(lines []string, last netip.Addr) netip.Addr {
	for i := len(lines) - 1; i >= 0; i-- {
		s := lines[i]
		for s != "" {
			var hop string
			if j := strings.LastIndexByte(s, ','); j >= 0 {
				hop, s = s[j+1:], s[:j]
			} else {
				hop, s = s, ""
			}
			hop = strings.TrimSpace(hop)
			if hop == "" {
				continue
			}
			a, ok := ParseNode(hop)
			if !ok {
				return last
			}
			if !r.trusted(a) {
				return a
			}
			last = a
		}
	}
	return last
}

// walkForwarded walks the elements of each line from the right, split
// there too (lastComma): RFC 7239 lets a proxy append its element to the
// line it received, after a comma, so a line can end in a proxy's element
// behind a client's malformed text. Split from the left, a quote the
// client left open would swallow the proxy's element and make the whole
// line unreadable, answering the proxy's address for the client.
func (r Resolver) walkForwarded(lines []string, last netip.Addr) netip.Addr {
	for i := len(lines) - 1; i >= 0; i-- {
		for s := lines[i]; ; {
			j, ok := lastComma(s)
			if !ok {
				return last
			}
			if elem := s[j+1:]; strings.TrimSpace(elem) != "" {
				e, err := parseElement(elem)
				if err != nil || e.For == "" {
					return last
				}
				a, ok := ParseNode(e.For)
				if !ok {
					return last
				}
				if !r.trusted(a) {
					return a
				}
				last = a
			}
			if j < 0 {
				break
			}
			s = s[:j]
		}
	}
	return last
}

// lastComma returns the index of the last comma of s outside quoted
// strings, scanning from the right, or -1 if there is none. ok is false
// when the scan meets the end of a quoted string whose start it cannot
// find (an unterminated string, seen from the right). Inside a quoted
// string, a quote after an odd number of backslashes is escaped; on a
// well-formed line this splits exactly as splitElements does.
func lastComma(s string) (int, bool) {
	quoted := false
	for i := len(s) - 1; i >= 0; i-- {
		switch s[i] {
		case ',':
			if !quoted {
				return i, true
			}
		case '"':
			if quoted {
				n := 0
				for n < i && s[i-1-n] == '\\' {
					n++
				}
				if n%2 == 1 {
					continue
				}
			}
			quoted = !quoted
		}
	}
	return -1, !quoted
}

// parseRemote reads http.Request.RemoteAddr: "IP:PORT", "[IPv6]:PORT" or
// a bare address.
func parseRemote(s string) netip.Addr {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return normalize(ap.Addr())
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return normalize(a)
	}
	return netip.Addr{}
}

func normalize(a netip.Addr) netip.Addr { return a.Unmap().WithZone("") }

// ParseNode reads one hop as X-Forwarded-For or the for= parameter of
// Forwarded (already unquoted) write it: "192.0.2.1", "192.0.2.1:8080",
// "[2001:db8::1]", "[2001:db8::1]:8080", or a bare "2001:db8::1". It
// reports false for "unknown", obfuscated identifiers ("_hidden") and
// anything else that is not an address; a port may be digits or an
// obfuscated "_port".
func ParseNode(s string) (netip.Addr, bool) {
	if s == "" {
		return netip.Addr{}, false
	}
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		a, err := netip.ParseAddr(s[1:end])
		if err != nil || !a.Is6() || !validPort(s[end+1:]) {
			return netip.Addr{}, false
		}
		return normalize(a), true
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return normalize(a), true
	}
	host, port, ok := strings.Cut(s, ":")
	if !ok || !validPort(":"+port) {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(host)
	if err != nil || !a.Is4() {
		return netip.Addr{}, false
	}
	return a, true
}

// validPort accepts "", ":DIGITS" (up to 65535) and ":_obfuscated".
func validPort(s string) bool {
	if s == "" {
		return true
	}
	if s[0] != ':' || len(s) < 2 {
		return false
	}
	p := s[1:]
	if p[0] == '_' {
		return validObf(p[1:])
	}
	if len(p) > 5 {
		return false
	}
	n := 0
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
		n = n*10 + int(p[i]-'0')
	}
	return n <= 65535
}

// validObf reports whether s is made of RFC 7239 obfuscation characters
// (ALPHA / DIGIT / "." / "_" / "-").
func validObf(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
