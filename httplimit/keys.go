package httplimit

import (
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/clientip"
)

// KeyByRemoteIP keys a request by the IP address of the connection
// (r.RemoteAddr without the port), as the daemon's ip key does: an IPv4
// client by its address, an IPv6 client by its /64 ("2001:db8:1:2::/64"),
// because one IPv6 host usually holds a whole /64 and could rotate through
// it; an IPv4-mapped IPv6 address counts as IPv4. It ignores
// X-Forwarded-For: behind a proxy, use KeyByClientIP.
func KeyByRemoteIP(r *http.Request) (string, bool) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		if r.RemoteAddr == "" {
			return "", false
		}
		host = r.RemoteAddr
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return clientip.Prefixes{}.Key(a), true
	}
	return host, true
}

// KeyByClientIP keys a request by the address of the client behind the
// proxies res trusts (X-Forwarded-For, Forwarded; see package clientip),
// counted as prefixes p says (the zero Prefixes: an IPv4 address, an IPv6
// /64). This is the daemon's ip key. A request whose client address is not
// an IP address (a Unix socket) is not counted.
//
//	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")} // your load balancers
//	key := httplimit.KeyByClientIP(clientip.Resolver{Trusted: trusted}, clientip.Prefixes{})
func KeyByClientIP(res clientip.Resolver, p clientip.Prefixes) KeyFunc {
	return func(r *http.Request) (string, bool) {
		a := res.ClientIP(r)
		if !a.IsValid() {
			return "", false
		}
		return p.Key(a), true
	}
}

// KeyByHeader keys a request by the first value of header name (an API
// key, a tenant id); a request without it, or with an empty value, is not
// counted by the rule. Give unauthenticated requests a rule of their own
// (by IP), or they pass this one unlimited. KeyByHeader("Host") reads
// r.Host, where net/http puts the Host header (as sent, port included).
func KeyByHeader(name string) KeyFunc {
	name = textproto.CanonicalMIMEHeaderKey(name)
	if name == "Host" {
		return func(r *http.Request) (string, bool) { return r.Host, r.Host != "" }
	}
	return func(r *http.Request) (string, bool) {
		vs := r.Header[name]
		if len(vs) == 0 || vs[0] == "" {
			return "", false
		}
		return vs[0], true
	}
}

// KeyByQuery keys a request by the first value of query parameter name; a
// request without it, or with an empty value, is not counted.
func KeyByQuery(name string) KeyFunc {
	return func(r *http.Request) (string, bool) {
		v := r.URL.Query().Get(name)
		return v, v != ""
	}
}

// KeyByCookie keys a request by the value of cookie name (a session); a
// request without it, or with an empty value, is not counted.
func KeyByCookie(name string) KeyFunc {
	return func(r *http.Request) (string, bool) {
		c, err := r.Cookie(name)
		if err != nil || c.Value == "" {
			return "", false
		}
		return c.Value, true
	}
}

// KeyByPath keys a request by its URL path (a per-route limit; combine it
// with a client key with Keys).
func KeyByPath(r *http.Request) (string, bool) { return r.URL.Path, true }

// Keys combines key functions: the request is counted under all their
// values together (per API key and route, per IP and user), and not
// counted if any of them does not apply. Each value is written as
// LENGTH:VALUE, so no two different combinations share a key, whatever
// the values contain.
func Keys(fns ...KeyFunc) KeyFunc {
	return func(r *http.Request) (string, bool) {
		var b strings.Builder
		for _, f := range fns {
			v, ok := f(r)
			if !ok {
				return "", false
			}
			b.WriteString(strconv.Itoa(len(v)))
			b.WriteByte(':')
			b.WriteString(v)
		}
		return b.String(), true
	}
}
