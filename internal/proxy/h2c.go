package proxy

import (
	"net/http"
	"net/textproto"
	"strings"
)

// An upgrade to HTTP/2 is never passed on: a client's Upgrade: h2c is
// dropped from the request (with HTTP2-Settings, which is hop-by-hop: RFC
// 9113 §3.1 deprecates the h2c upgrade, RFC 7540 §3.2.1 made the header
// connection-specific), and the request goes upstream as plain HTTP/1.1,
// as Envoy does by default (its HTTP/1 codec strips h2c upgrade headers)
// and nginx does unless told to pass Upgrade on. Were the upgrade passed
// on, an upstream that speaks h2c would switch the connection to HTTP/2,
// and the client could send any number of requests through the tunnel
// that Sluice neither sees nor limits ("h2c smuggling"). Other upgrades
// (WebSocket) still pass, also when named beside h2c in one list.

// dropHTTP2Upgrade removes from h's Upgrade the protocols that name HTTP/2
// (h2c, h2, HTTP/2, in any case), and the header if nothing else is left;
// h is unchanged when Upgrade names none. HTTP2-Settings is dropped
// elsewhere, with the hop-by-hop headers (internal/hop, rewrite).
func dropHTTP2Upgrade(h http.Header) {
	vv := h["Upgrade"]
	found := false
	for _, v := range vv {
		for p := range strings.SplitSeq(v, ",") {
			if http2Protocol(textproto.TrimString(p)) {
				found = true
			}
		}
	}
	if !found {
		return
	}
	var keep []string
	for _, v := range vv {
		for p := range strings.SplitSeq(v, ",") {
			if p = textproto.TrimString(p); p != "" && !http2Protocol(p) {
				keep = append(keep, p)
			}
		}
	}
	if len(keep) == 0 {
		delete(h, "Upgrade")
		return
	}
	h["Upgrade"] = []string{strings.Join(keep, ", ")}
}

// http2Protocol reports whether the Upgrade protocol p (name["/"version])
// is HTTP/2.
func http2Protocol(p string) bool {
	name, version, _ := strings.Cut(p, "/")
	return strings.EqualFold(name, "h2c") || strings.EqualFold(name, "h2") ||
		strings.EqualFold(name, "http") && strings.HasPrefix(version, "2")
}
