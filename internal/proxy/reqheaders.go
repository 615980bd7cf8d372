package proxy

import (
	"net/http"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/sluicehq/sluice/internal/hop"
)

// The request headers the proxy does not pass on as they came, on both
// paths (fast.go: writeRequest; reverse.go: rewrite) and in what the
// deferral queue stores (defer.go).

// dropRequestHeader reports whether the incoming header k is not
// forwarded on the fast path; conn: what the request's Connection names.
func dropRequestHeader(k string, conn hop.Names) bool {
	if hop.Is(k) || k == "Content-Length" || k == "Host" || proxyHeader(k) || underscoredHop(k) {
		return true
	}
	return conn.Has(k)
}

// proxyHeader reports whether the request header k is one a client's
// request never carries upstream: one only the proxy may set — a
// forwarding header (Forwarded, X-Forwarded-*), X-Real-IP (the proxy's
// own is the client address it found, as X-Forwarded-For), or
// Sluice-Deferred-Id, by which the upstream knows the replay of a deferred
// request (a client's own would pass a live request off as a replay, or as
// another's) — or X-Original-URL or X-Rewrite-URL, by which some
// frameworks route a request instead of by its request line (older
// Symfony and Zend Framework releases, apps behind IIS URL Rewrite): the
// rules match the request line, so a GET /public carrying
// X-Original-URL: /login would be counted as /public and served as /login.
// They are dropped from a trusted proxy's requests too, which the rules
// match by their request line all the same. Names are read as CGI and WSGI servers
// read them (RFC 3875 §4.1.18: any case, '_' for '-'), so that a client's
// X_Forwarded_For is dropped with its X-Forwarded-For: those servers would
// read it as the proxy's.
func proxyHeader(k string) bool {
	const xf, f, id, real = "x-forwarded-", "forwarded", "sluice-deferred-id", "x-real-ip"
	const orig, rewrite = "x-original-url", "x-rewrite-url"
	if len(k) < len(real) {
		return false
	}
	switch k[0] {
	case 'X', 'x':
		return len(k) >= len(xf) && hop.SameName(k[:len(xf)], xf) || hop.SameName(k, real) ||
			hop.SameName(k, orig) || hop.SameName(k, rewrite)
	case 'F', 'f':
		return hop.SameName(k, f)
	case 'S', 's':
		return hop.SameName(k, id)
	}
	return false
}

// underscoredHop reports whether the request header k is a hop-by-hop or
// framing header spelled with '_' for '-' (Transfer_Encoding,
// Content_Length, Keep_Alive, Proxy_Authorization and the like), which is
// never forwarded. Servers that read headers as CGI does (RFC 3875
// §4.1.18: HTTP_TRANSFER_ENCODING) take it for the header it spells, and
// Puma frames a body by it: a Transfer_Encoding: chunked passed on beside
// the Content-Length the proxy sends would have the upstream read the
// body by its chunks, and the bytes after the last one as a request of
// their own, which no rule decided, on a connection other clients'
// requests share. The names the proxy drops when spelled with '-' (hop-by-
// hop, and Content-Length, which it sets itself) go when spelled with '_'
// too, as proxyHeader's do.
func underscoredHop(k string) bool {
	if strings.IndexByte(k, '_') < 0 {
		return false
	}
	for _, name := range underscoredHops {
		if hop.SameName(k, name) {
			return true
		}
	}
	return false
}

// underscoredHops: the names underscoredHop drops, in lower case with '-'
// (those of hop.Is that have a '-', and Content-Length).
var underscoredHops = [...]string{"transfer-encoding", "content-length", "keep-alive", "proxy-connection",
	"proxy-authenticate", "proxy-authorization", "http2-settings"}

// clientIPHeader reports whether the request header k is one by which a
// CDN or load balancer tells the client's address (True-Client-IP and
// the like; Sluice reads none of them): passed upstream from a trusted
// proxy (client_ip.trusted_proxies), which set it, and dropped from any
// other peer, which may have written any address into it. Names are read
// as proxyHeader reads them.
func clientIPHeader(k string) bool {
	if len(k) < len("x-client-ip") {
		return false
	}
	var name string
	switch k[0] {
	case 'T', 't':
		name = "true-client-ip"
	case 'X', 'x':
		name = "x-client-ip"
		if len(k) == len("x-cluster-client-ip") {
			name = "x-cluster-client-ip"
		}
	case 'C', 'c':
		name = "cf-connecting-ip"
	case 'F', 'f':
		name = "fastly-client-ip"
	default:
		return false
	}
	return hop.SameName(k, name)
}

// forwarded is what the proxy sends upstream as X-Forwarded-Proto,
// X-Forwarded-Host and X-Forwarded-Port ("": none), and as the host= and
// proto= of its Forwarded (appendForwarded).
type forwarded struct{ proto, host, port string }

// forwarded returns the X-Forwarded-Proto, -Host and -Port that go
// upstream with r. From a trusted proxy (client_ip.trusted_proxies), each
// it sent as one valid value passes on, as Caddy and Traefik keep them:
// behind a balancer that ends TLS the upstream then sees https, not the
// scheme of the balancer's hop to Sluice. Otherwise Proto is the scheme
// of Sluice's own listener, Host the request's Host, and Port none: from
// any other peer, or when the value is missing, invalid, or sent more
// than once (two lines, or a comma list, whose first element may be the
// client's own text when a proxy appended to it rather than replacing
// it). A trusted proxy's RFC 7239 Forwarded stands in for the
// X-Forwarded-Proto or -Host it did not send, by its proto= and host=
// (forwardedElement), when it sent no X-Forwarded-For; one it sent, even
// an invalid one, is read alone, as package clientip reads
// X-Forwarded-For before Forwarded. Only these
// canonical spellings are read; X_Forwarded_Proto and the like are
// dropped with the rest (proxyHeader).
func (p *Proxy) forwarded(r *http.Request, trust *peerTrust) forwarded {
	f := forwarded{proto: "http", host: r.Host}
	if r.TLS != nil {
		f.proto = "https"
	}
	h := r.Header
	vproto, vhost, vport, vfwd := h["X-Forwarded-Proto"], h["X-Forwarded-Host"], h["X-Forwarded-Port"], h["Forwarded"]
	if vproto == nil && vhost == nil && vport == nil && vfwd == nil || !trust.passes(p, r) {
		return f
	}
	var eproto, ehost string
	// A peer that sent X-Forwarded-For speaks X-Forwarded-*: a Forwarded
	// beside it is the client's, which nginx or an AWS ALB pass on as it
	// came, and package clientip reads its for= only without one, too.
	if vfwd != nil && (vproto == nil || vhost == nil) && h["X-Forwarded-For"] == nil {
		eproto, ehost = forwardedElement(vfwd)
	}
	if vproto == nil {
		if eproto != "" {
			f.proto = eproto
		}
	} else if len(vproto) == 1 {
		if s := forwardedProto(vproto[0]); s != "" {
			f.proto = s
		}
	}
	if vhost == nil {
		if ehost != "" {
			f.host = ehost
		}
	} else if len(vhost) == 1 && validForwardedHost(vhost[0]) {
		f.host = vhost[0]
	}
	if len(vport) == 1 && validForwardedPort(vport[0]) {
		f.port = vport[0]
	}
	return f
}

// forwardedProto returns "http" or "https" for an X-Forwarded-Proto value
// that is one of them in any case, else "".
func forwardedProto(v string) string {
	switch {
	case strings.EqualFold(v, "https"):
		return "https"
	case strings.EqualFold(v, "http"):
		return "http"
	}
	return ""
}

// validForwardedHost reports whether v is one host[:port] as net/http
// accepts a Host header: not empty, and no comma, which would make it a
// list of hosts.
func validForwardedHost(v string) bool {
	return v != "" && strings.IndexByte(v, ',') < 0 && httpguts.ValidHostHeader(v)
}

// validForwardedPort reports whether v is a port number, 1 to 65535, in
// digits alone with no leading zero.
func validForwardedPort(v string) bool {
	if v == "" || len(v) > 5 || v[0] == '0' {
		return false
	}
	n := 0
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int(c-'0')
	}
	return n <= 65535
}

// peerTrust caches whether a request's peer is a trusted proxy: asked
// only of a request that carries a clientIPHeader or one of the
// forwarding headers forwarded reads.
type peerTrust int8

const (
	trustUnknown peerTrust = iota
	trustYes
	trustNo
)

// passes reports whether the client-IP header of r passes upstream: r
// comes from a trusted proxy.
func (t *peerTrust) passes(p *Proxy, r *http.Request) bool {
	if *t == trustUnknown {
		*t = trustNo
		if p.o.ClientIP.Trusts(r) {
			*t = trustYes
		}
	}
	return *t == trustYes
}
