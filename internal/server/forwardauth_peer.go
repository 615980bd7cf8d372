package server

import (
	"net/http"
	"net/netip"
	"sync"

	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/internal/rules"
)

// maxWarnedGateways bounds the gateways warnUntrusted remembers, and so
// the lines it logs.
const maxWarnedGateways = 16

// gatewayWarnings remembers the gateways already warned about.
type gatewayWarnings struct {
	mu   sync.Mutex
	seen map[netip.Addr]struct{}
}

// checkGateway warns, once per gateway address (the first
// maxWarnedGateways of them), of a forward-auth request whose
// X-Forwarded-For was not believed because client_ip.trusted_proxies does
// not list the gateway that sent it: every client that gateway asks about
// is then counted as the gateway, one count for all. ip is the client
// address Options.ClientIP found.
func (h *Handler) checkGateway(r *http.Request, ip netip.Addr) {
	if len(r.Header["X-Forwarded-For"]) == 0 {
		return
	}
	peer, ok := peerOf(r)
	if !ok || peer != ip { // the header was believed
		return
	}
	if h.o.ClientIP.Trusts(r) { // believed, and it named the gateway itself
		return
	}
	if h.gateways.first(peer) {
		h.o.Logger.Warn("forward-auth: a gateway sends X-Forwarded-For, but client_ip.trusted_proxies does not list it, so every client it asks about counts as the gateway; list it",
			"gateway", gatewayName(peer))
	}
}

// peerOf returns the address of the gateway that sent r: its IP address,
// or rules.UnixClient for the peer of a Unix socket; ok is false when
// r's RemoteAddr is neither.
func peerOf(r *http.Request) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	if clientip.IsUnixPeer(r.RemoteAddr) {
		return rules.UnixClient, true
	}
	return netip.Addr{}, false
}

// gatewayName is peer as logged: its address, or unix: (trusted_proxies'
// entry for it) for the peer of a Unix socket.
func gatewayName(peer netip.Addr) string {
	if peer == rules.UnixClient {
		return "unix:"
	}
	return peer.String()
}

// first reports whether peer is new to w, and remembers it (the first
// maxWarnedGateways peers only: later ones are never new).
func (w *gatewayWarnings) first(peer netip.Addr) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, seen := w.seen[peer]; seen || len(w.seen) >= maxWarnedGateways {
		return false
	}
	if w.seen == nil {
		w.seen = make(map[netip.Addr]struct{})
	}
	w.seen[peer] = struct{}{}
	return true
}

// checkMethod warns, once per gateway address, of a forward-auth request
// that says nothing of the original method (neither X-Forwarded-Method
// nor X-Original-Method) while a rule of set applies to some methods only:
// the request is matched as the auth request's own method (GET, from
// nginx's auth_request, Caddy and Traefik), so a rule for POST /login
// never applies to what the gateway asks about. nginx's own auth_request
// example sets X-Original-URI alone.
func (h *Handler) checkMethod(r *http.Request, set *rules.Set) {
	if set == nil || sent(r.Header, keyForwardedMethod) || sent(r.Header, keyOriginalMethod) {
		return
	}
	restricted := false
	for _, rl := range set.Rules {
		restricted = restricted || len(rl.Methods) > 0
	}
	if !restricted {
		return
	}
	peer, ok := peerOf(r)
	if !ok {
		return
	}
	if h.methodless.first(peer) {
		h.o.Logger.Warn("forward-auth: a gateway sends no X-Forwarded-Method (nor X-Original-Method), so its requests are matched as the method it asks with, and rules for other methods never apply to them; have it send the original request's method",
			"gateway", gatewayName(peer), "method", logCut(r.Method))
	}
}

// sent reports whether h has a non-empty line of key (in canonical form).
func sent(h http.Header, key string) bool {
	for _, v := range h[key] {
		if v != "" {
			return true
		}
	}
	return false
}
