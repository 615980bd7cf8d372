package proxy

import "net/http"

// Extended CONNECT (RFC 8441: WebSockets over HTTP/2, a CONNECT with a
// :protocol pseudo-header and a :path) is refused with 501, before any
// rule is matched. Go's HTTP/2 server offers it
// (SETTINGS_ENABLE_CONNECT_PROTOCOL) only when the process runs with
// GODEBUG=http2xconnect=1, and then hands the handler a request whose
// method is CONNECT, with the pseudo-header among its headers. The proxy
// cannot tunnel it: the upstream is spoken to over HTTP/1.1, where a
// WebSocket is a GET with Upgrade. Passed on, it would reach the upstream
// as CONNECT /path, which rules written for WebSocket upgrades
// (methods: [GET]) do not match; today net/http's Transport refuses the
// header name (a 502 blaming the upstream), which is no promise. A
// client told 501 opens its WebSocket over HTTP/1.1, which the proxy
// passes through and the rules see as the GET it is.

// extendedConnect reports whether r is an extended CONNECT.
func extendedConnect(r *http.Request) bool {
	if r.Method != http.MethodConnect {
		return false
	}
	_, ok := r.Header[":protocol"]
	return ok
}

// refuseConnect answers a CONNECT: an extended one 501; any other (a
// forward proxy's tunnel, CONNECT host:port, which a reverse proxy does
// not offer) 405. Passed on, the upstream would get a method it never
// expects, past every rule written for a path (a CONNECT has none).
func refuseConnect(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	if extendedConnect(r) {
		w.WriteHeader(http.StatusNotImplemented)
		w.Write([]byte(`{"error":"extended_connect_unsupported","message":"the proxy does not tunnel extended CONNECT (RFC 8441); open the WebSocket over HTTP/1.1"}` + "\n"))
		return
	}
	h["Allow"] = []string{"GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"}
	w.WriteHeader(http.StatusMethodNotAllowed)
	w.Write([]byte(`{"error":"method_not_allowed","message":"a reverse proxy does not tunnel CONNECT"}` + "\n"))
}
