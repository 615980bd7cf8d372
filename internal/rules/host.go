package rules

import (
	"net/netip"
	"strings"
)

// HostKey returns the form of a request's Host that a header:Host key
// part counts: the host as a server routes on it, written as nginx's
// $host writes it — ASCII letters lower-cased, a port (":8000", or a
// bare ":") and one final dot removed. net/http, Caddy and Traefik pass
// the Host on as the client wrote it, and a site answers
// "API.Example.com:8000" and "api.example.com." as "api.example.com":
// counted as written, each spelling was a fresh count of the one site.
// Only one final dot goes: nginx and Apache refuse a Host with an empty
// label ("a.example..", 400), and Go's ServeMux and Caddy route it as
// sent, so it is no spelling of "a.example" and keeps a count of its own. A
// Host left empty by this (":80", ".") is kept as it came, so that it is
// still counted. An IPv6 literal is written in its one spelling
// ("[2001:0DB8:0::1]" is "[2001:db8::1]"). An already lower-case Host without a port or final dot
// is returned as it is, without allocating.
func HostKey(h string) string {
	s := h
	if strings.HasPrefix(s, "[") { // an IPv6 literal, its port after ']'
		if j := strings.IndexByte(s, ']'); j > 0 && port(s[j+1:]) {
			s = s[:j+1]
		}
	} else if i := strings.IndexByte(s, ':'); i >= 0 && port(s[i:]) {
		s = s[:i]
	}
	s = strings.TrimSuffix(s, ".")
	if s == "" {
		s = h
	}
	if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		// An IPv6 literal in its one spelling (RFC 5952: lower case,
		// zeros compressed), so that [2001:0db8:0::1] is [2001:db8::1].
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil && a.Is6() && a.Zone() == "" {
			if c := a.String(); c != s[1:len(s)-1] {
				return "[" + c + "]"
			}
		}
	}
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'A' <= b[j] && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// port reports whether s is a Host's port part: "" (none), or ':' and
// digits only (none at all: a bare ':', which servers read as no port).
func port(s string) bool {
	if s == "" {
		return true
	}
	if s[0] != ':' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
