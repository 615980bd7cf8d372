package proxy

import (
	"errors"
	"net"
	"net/http"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/listener"
)

// fail answers r whose forwarding failed with err; res, if not nil, is the
// decision that let it through. It reports whether the failure was r's
// client going away (answered 499).
func (p *Proxy) fail(w http.ResponseWriter, r *http.Request, res *engine.Result, err error) (gone bool) {
	stalled := listener.TimedOut(r) || errors.Is(err, listener.ErrBodyTimeout)
	if r.Context().Err() != nil && !stalled {
		writeGone(w) // the client went away: for the logs, nobody reads it
		return true
	}
	status, msg := http.StatusBadGateway, "bad_gateway"
	var ne net.Error
	switch {
	case stalled:
		// The client's body stalled (body_read_timeout): the upstream
		// request was abandoned, its connection freed; the client is at
		// fault, not the upstream.
		status, msg = http.StatusRequestTimeout, "request_timeout"
		w.Header()["Connection"] = []string{"close"}
		p.logClient(&p.stallLog, "client body stalled", r)
	case errors.Is(err, errClientBody):
		// The client's body could not be read (a malformed chunked
		// encoding): the request is at fault, not the upstream, which
		// never got it whole. What is left of the body cannot be
		// framed: the connection closes.
		status, msg = http.StatusBadRequest, "bad_request"
		w.Header()["Connection"] = []string{"close"}
		p.logClient(&p.badLog, "client body unreadable", r, "err", err)
	case errors.As(err, &ne) && ne.Timeout():
		status, msg = http.StatusGatewayTimeout, "gateway_timeout"
		fallthrough
	default:
		p.logUpstream(r, err)
	}
	h := w.Header()
	if res != nil {
		res.SetHeaders(h) // the request was counted: say so
	}
	h["Content-Type"] = []string{"application/json"}
	w.WriteHeader(status)
	w.Write([]byte(`{"error":"` + msg + `"}` + "\n"))
	return false
}

// writeGone answers 499 (nginx's "client closed request"), with no body
// and no rate-limit headers, a request whose client went away before it
// was decided, while it was held for its slot, or before the upstream
// answered: net/http and the h1 front would otherwise send (and log) an
// empty 200 for a handler that wrote nothing, and a client that only
// half-closed its connection would read it.
func writeGone(w http.ResponseWriter) {
	w.WriteHeader(httplimit.StatusClientClosedRequest)
}
