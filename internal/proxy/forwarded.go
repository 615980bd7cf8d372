package proxy

import (
	"net/netip"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/sluicehq/sluice/clientip"
)

// RFC 7239 Forwarded: what the proxy believes of a trusted proxy's
// (forwardedElement) and the one element it sends upstream
// (appendForwarded). The client address a trusted proxy's for= names is
// package clientip's to find.

// forwardedElement returns the proto ("http" or "https") and host of the
// Forwarded header lines a trusted proxy sent ("": none), under the rules
// its X-Forwarded-Proto and -Host pass by: one line holding one element
// (empty elements aside), each value valid, quoted or not. A list is not
// split, as its first element may be the client's own text when a proxy
// appended to it. An element is believed whole or not at all: not when it
// does not parse (a quote left open, a parameter twice, a value neither a
// token nor a quoted string), nor when one of its values is invalid: a
// proto other than http or https, a host that is not one host[:port], a
// for= or by= that is not a node (an address, unknown, or an obfuscated
// identifier, with an optional port).
func forwardedElement(lines []string) (proto, host string) {
	if len(lines) != 1 {
		return "", ""
	}
	es, err := clientip.ParseForwarded(lines[0])
	if err != nil || len(es) != 1 {
		return "", ""
	}
	e := es[0]
	if e.Proto != "" {
		if proto = forwardedProto(e.Proto); proto == "" {
			return "", ""
		}
	}
	if e.Host != "" && !validForwardedHost(e.Host) ||
		e.For != "" && !validNode(e.For) || e.By != "" && !validNode(e.By) {
		return "", ""
	}
	return proto, e.Host
}

// validNode reports whether s (unquoted) is a node of RFC 7239 §6: an
// IPv4 address, a bracketed IPv6 one (no zone), "unknown" (any case), or
// an obfuscated identifier, with an optional port: 0 to 65535 in up to
// five digits, or obfuscated. ParseNode is laxer: it reads a bare IPv6
// address too.
func validNode(s string) bool {
	if s != "" && s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return false
		}
		a, err := netip.ParseAddr(s[1:end])
		if err != nil || !a.Is6() || a.Zone() != "" {
			return false
		}
		rest := s[end+1:]
		return rest == "" || rest[0] == ':' && validNodePort(rest[1:])
	}
	name, port, hasPort := strings.Cut(s, ":")
	if hasPort && !validNodePort(port) {
		return false
	}
	if strings.EqualFold(name, "unknown") || validObfuscated(name) {
		return true
	}
	a, err := netip.ParseAddr(name)
	return err == nil && a.Is4()
}

// validObfuscated reports whether s is "_" and one or more letters,
// digits, '.', '_' or '-' (RFC 7239 §6.3).
func validObfuscated(s string) bool {
	if len(s) < 2 || s[0] != '_' {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// validNodePort reports whether s is a node-port of RFC 7239: obfuscated,
// or 1 to 5 digits (leading zeros allowed, unlike in X-Forwarded-Port)
// up to 65535.
func validNodePort(s string) bool {
	if validObfuscated(s) {
		return true
	}
	if s == "" || len(s) > 5 {
		return false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n <= 65535
}

// appendForwarded appends to b the Forwarded element the proxy sends
// upstream, which says what its X-Forwarded-For, -Host and -Proto say:
// for= the client address ip (none when it is not valid: not an IP
// peer), host= host (none when it is not a forwardedHost) and proto=
// proto, quoted where they are not tokens, as in
// for="[2001:db8::1]";host="app.example:8443";proto=https.
func appendForwarded(b []byte, ip netip.Addr, host, proto string) []byte {
	if ip.IsValid() {
		b = append(b, "for="...)
		if ip.Is6() { // unmapped, without zone (package clientip)
			b = append(b, `"[`...)
			b = ip.AppendTo(b)
			b = append(b, `]";`...)
		} else {
			b = ip.AppendTo(b)
			b = append(b, ';')
		}
	}
	if forwardedHost(host) {
		// It holds no '"', '\' or control character: quoted as it is.
		b = append(b, "host="...)
		if httpguts.ValidHeaderFieldName(host) {
			b = append(b, host...)
		} else {
			b = append(b, '"')
			b = append(b, host...)
			b = append(b, '"')
		}
		b = append(b, ';')
	}
	b = append(b, "proto="...)
	return append(b, proto...)
}

// forwardedHost reports whether the Host host goes upstream as the host=
// of Forwarded: when it is one RFC 7239 allows, a uri-host [":" port] of
// RFC 3986 (net/http takes any of its bytes in any order: a%zz, a:b:c,
// x[y]), which a strict parser would otherwise refuse with the whole
// header, for= and all; and holds none of ',', ';' and '=', which a
// reg-name may but no DNS name or address does, and which an upstream
// that splits the header at ',' and ';' without reading quoted strings
// would take for the end of the element (host="x,for=192.0.2.66" would
// name it a client). Its IP-literal is an IPv6 address without a zone
// (RFC 6874's %25 is not RFC 3986's). It allocates nothing.
func forwardedHost(host string) bool {
	if host == "" {
		return false
	}
	port := ""
	if host[0] == '[' {
		end := strings.IndexByte(host, ']')
		if end < 0 {
			return false
		}
		a, err := netip.ParseAddr(host[1:end])
		if err != nil || !a.Is6() || a.Zone() != "" {
			return false
		}
		port = host[end+1:]
	} else {
		name := host
		if i := strings.IndexByte(host, ':'); i >= 0 {
			name, port = host[:i], host[i:]
		}
		if name == "" {
			return false
		}
		for i := 0; i < len(name); i++ {
			switch c := name[i]; {
			case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~!$&'()*+", c) >= 0:
			case c == '%' && i+2 < len(name) && isHex(name[i+1]) && isHex(name[i+2]):
				i += 2
			default:
				return false
			}
		}
	}
	if port == "" {
		return true
	}
	if port[0] != ':' {
		return false
	}
	for i := 1; i < len(port); i++ {
		if port[i] < '0' || port[i] > '9' {
			return false
		}
	}
	return true
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// forwardedValue is appendForwarded's element as a header value, for the
// ReverseProxy path and the deferral queue: one allocation, the string,
// unless the host is longer than a host name may be.
func forwardedValue(ip netip.Addr, host, proto string) string {
	var buf [320]byte // for="[IPv6]"; host="<253 bytes>:65535";proto=https
	return string(appendForwarded(buf[:0], ip, host, proto))
}
