package server

import (
	"net/http"
	"net/netip"
	"sync"
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
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return
	}
	peer := ap.Addr().Unmap().WithZone("")
	if peer != ip { // the header was believed
		return
	}
	for _, p := range h.o.ClientIP.Trusted {
		if p.Contains(peer) { // believed, and it named the gateway itself
			return
		}
	}
	w := &h.gateways
	w.mu.Lock()
	_, seen := w.seen[peer]
	if !seen && len(w.seen) < maxWarnedGateways {
		if w.seen == nil {
			w.seen = make(map[netip.Addr]struct{})
		}
		w.seen[peer] = struct{}{}
	} else {
		seen = true
	}
	w.mu.Unlock()
	if !seen {
		h.o.Logger.Warn("forward-auth: a gateway sends X-Forwarded-For, but client_ip.trusted_proxies does not list it, so every client it asks about counts as the gateway; list it",
			"gateway", peer.String())
	}
}
