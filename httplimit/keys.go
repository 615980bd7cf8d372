package httplimit

import (
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/internal/rules"
)

// KeyByRemoteIP keys a request by the IP address of the connection
// (r.RemoteAddr without the port), as the daemon's ip key does: an IPv4
// client by its address, an IPv6 client by its /64 ("2001:db8:1:2::/64"),
// because one IPv6 host usually holds a whole /64 and could rotate through
// it; an IPv4-mapped IPv6 address counts as IPv4. A RemoteAddr that is not
// an IP address (a Unix socket's "@") is the key as it is, so every client
// of such a listener shares one count (KeyByClientIP counts none of them);
// an empty one is not counted. It ignores X-Forwarded-For: behind a proxy,
// use KeyByClientIP.
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
// r.Host, where net/http puts the Host header, as the daemon's header:Host
// counts it: lower-cased, without a port or a final dot
// ("Shop.Example.com:8000" and "shop.example.com." are
// "shop.example.com"), since a handler serves every such spelling as the
// one site, and counted as sent each was a fresh allowance.
// KeyByHeader("Authorization") (and "Proxy-Authorization") counts the
// credential, as the daemon's header:Authorization does: the scheme in
// any case and a Basic credential's base64 in any spelling that decodes
// alike ("basic dXNlcjpwYXNzMR==" is "Basic dXNlcjpwYXNzMQ=="), since
// r.BasicAuth and other servers read them as one. (The daemon also counts
// a Basic credential in the URL-safe alphabet as Node reads it; a Go
// handler's r.BasicAuth refuses that spelling.)
func KeyByHeader(name string) KeyFunc {
	name = textproto.CanonicalMIMEHeaderKey(name)
	switch name {
	case "Host":
		return func(r *http.Request) (string, bool) { return rules.HostKey(r.Host), r.Host != "" }
	case "Authorization", "Proxy-Authorization":
		return func(r *http.Request) (string, bool) {
			vs := r.Header[name]
			if len(vs) == 0 || vs[0] == "" {
				return "", false
			}
			return rules.AuthorizationKey(vs[0]), true
		}
	}
	return func(r *http.Request) (string, bool) {
		vs := r.Header[name]
		if len(vs) == 0 || vs[0] == "" {
			return "", false
		}
		return vs[0], true
	}
}

// KeyByQuery keys a request by query parameter name as a Go handler reads
// it: its first value, the query read as url.ParseQuery reads it (escapes
// decoded, '+' as a space; a pair with a ';' or a bad escape skipped),
// which is what r.URL.Query().Get and r.FormValue return. A request
// without it, or with an empty value, is not counted.
//
// Sent twice (?api_key=victim&api_key=mine), it is counted under the
// first, the value the handler reads, so a client cannot be counted
// under one key while served under the other. The daemon's query:NAME
// counts such a request under each value instead, since the app behind
// it may read the last (PHP, Rails); in front of such an app (an
// httputil.ReverseProxy), KeyByQuery counts a value the app may not
// read: limit it with the daemon, or by a header. KeyByQuery reads the
// URL only: r.FormValue prefers a form body's value (a POST of
// application/x-www-form-urlencoded), so for a handler that takes its
// key from FormValue, write a KeyFunc that returns r.FormValue(name)
// (it reads the body into r.PostForm, where the handler finds it).
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
// with a client key with Keys), in the canonical form the daemon's path
// key part counts, so that a client cannot pass a route's limit by
// spelling the path another way its router may serve alike: escapes
// decoded, "." and ".." resolved, repeated slashes merged, ";parameters"
// and a trailing slash removed ("/login/", "//login", "/login;x" and
// "/a/../login" all count as "/login"). Case is kept.
func KeyByPath(r *http.Request) (string, bool) { return rules.CanonicalPath(r.URL.Path), true }

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

// MaxKeyLen bounds the key a KeyFunc returns as the store keeps it: a
// longer key (a header can hold up to net/http's 1 MB) is kept as "#" and
// its SHA-256 in hex, so that no request can pin more than a few hundred
// bytes of store memory; a shorter key that itself starts with "#" gets a
// second "#", so it never meets a digest. This is what the sluice daemon
// does with its keys.
const MaxKeyLen = 256

// boundKey is key as the store keeps it (see MaxKeyLen).
func boundKey(key string) string {
	switch {
	case len(key) > MaxKeyLen:
		sum := sha256.Sum256([]byte(key))
		var b [1 + 2*sha256.Size]byte
		b[0] = '#'
		hex.Encode(b[1:], sum[:])
		return string(b[:])
	case len(key) > 0 && key[0] == '#':
		return "#" + key
	}
	return key
}
