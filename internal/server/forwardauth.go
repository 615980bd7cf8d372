package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/net/http/httpguts"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/h1"
	"github.com/sluicehq/sluice/internal/rules"
)

// forwardAuth answers /v1/forward-auth (any method) for gateways that ask
// before forwarding: nginx auth_request, Caddy forward_auth, Traefik
// ForwardAuth. The original request is rebuilt from
//
//	method: X-Forwarded-Method, else X-Original-Method, else this request's method
//	URI:    X-Forwarded-Uri, else X-Original-URI (required), without a #fragment
//	host:   X-Forwarded-Host, else this request's Host
//	client: X-Forwarded-For, believed only from Options.ClientIP's trusted proxies
//
// (a method that is not one token, or a URI with a space, is refused: no
// one request has it) and its other headers (cookies, API keys) are this
// request's, as the gateways pass them on. The rules are matched and decided as the proxy
// does (action delay holds the answer). The answer is 200 with the
// rate-limit headers, or the limited answer (Retry-After, the JSON body)
// with status forward_auth.deny_status, or 503 when the store cannot
// decide under on_error deny.
func (h *Handler) forwardAuth(w http.ResponseWriter, r *http.Request) {
	o := origRequests.Get().(*origRequest)
	orig, err := originalRequest(r, o)
	if err != nil {
		origRequests.Put(o)
		h.fail(w, err)
		return
	}
	e := h.o.Engine()
	ip := h.o.ClientIP.ClientIP(orig)
	if !ip.IsValid() && clientip.IsUnixPeer(r.RemoteAddr) {
		ip = rules.UnixClient // one count for the socket's clients
	}
	h.checkGateway(r, ip)
	h.checkMethod(r, e.Rules())
	var buf [8]rules.Match
	ms, err := e.Match(orig, ip, buf[:0])
	*o = origRequest{} // nothing of the request is pooled with it
	origRequests.Put(o)
	if err != nil {
		engine.WriteMatchError(w, err)
		return
	}
	ctx, stop := r.Context(), func() {}
	if delays(ms) {
		// On the h1 front, have the connection watched while the answer
		// may be held, so that a gateway that leaves ends the wait, as
		// on net/http (the proxy does the same).
		ctx, stop = h1.Watch(ctx)
	}
	res := e.Admit(ctx, ms, 1)
	stop()
	if res.Err != nil { // the gateway went away while held or before the store answered
		h.fail(w, errGone)
		return
	}
	if !res.Allowed {
		if res.StoreErr == nil && res.DeniedBy != nil {
			// The body's retry_after_ms, for a gateway that keeps no body
			// of this answer (nginx's auth_request) to rebuild it.
			w.Header()[keyRetryAfterMillis] = []string{strconv.FormatInt(httplimit.RetryAfterMillis(res.Decision), 10)}
		}
		engine.WriteDenied(w, &res, h.o.DenyStatus)
		return
	}
	hd := w.Header()
	res.SetHeaders(hd)
	if r.Method != http.MethodHead {
		// The empty body declared before WriteHeader: the h1 front then
		// writes the head at once, without copying the header map to
		// learn the length after the handler returns (net/http sends
		// the same Content-Length: 0 either way; for HEAD it sends none).
		hd["Content-Length"] = contentLength0
	}
	w.WriteHeader(http.StatusOK)
}

// contentLength0 is an empty answer's Content-Length value, shared: no
// writer changes a header's values.
var contentLength0 = []string{"0"}

// keyRetryAfterMillis is the header of a limited forward-auth answer that
// carries its body's retry_after_ms.
const keyRetryAfterMillis = "X-Ratelimit-Retry-After-Ms"

// delays reports whether a rule of ms may hold the answer (action delay).
func delays(ms []rules.Match) bool {
	for i := range ms {
		if ms[i].Rule.Action == rules.Delay {
			return true
		}
	}
	return false
}

// origRequest is the storage of the request a gateway asks about, pooled:
// it lives from originalRequest to the rules' match only.
type origRequest struct {
	r http.Request
	u url.URL
}

var origRequests = sync.Pool{New: func() any { return new(origRequest) }}

// The headers forward-auth reads, in canonical form: indexing the map
// with them skips canonicalizing per request (Header.Get's).
const (
	keyForwardedURI    = "X-Forwarded-Uri"
	keyOriginalURI     = "X-Original-Uri" // X-Original-URI, as nginx examples write it
	keyForwardedMethod = "X-Forwarded-Method"
	keyOriginalMethod  = "X-Original-Method"
	keyForwardedHost   = "X-Forwarded-Host"
)

// originalRequest rebuilds the request a gateway is asking about, in o.
func originalRequest(r *http.Request, o *origRequest) (*http.Request, error) {
	uri, err := agreed(r.Header, keyForwardedURI, "X-Forwarded-Uri", keyOriginalURI, "X-Original-URI", sameURI)
	if err != nil {
		return nil, err
	}
	if uri == "" {
		return nil, errBadRequest("missing X-Forwarded-Uri or X-Original-URI: configure the gateway to send the original request's URI")
	}
	// A fragment is no part of the request: nginx's $request_uri keeps
	// one a client sent ("POST /login#x"), while nginx routes, and most
	// apps behind it read, the path without it. Kept, it would make
	// "/login#x" a path no rule for /login matches. The query is another
	// matter: Go's server reads on past a '#' ("/items?x=1#&key=k" and
	// "/items#x?key=k" are key=k to it, and PHP's through Caddy's
	// php_fastcgi), so the query is kept whole, and a query key part
	// reads it both ways (rules' queryValues).
	full := uri
	uri, _, frag := strings.Cut(uri, "#")
	if strings.IndexByte(uri, ' ') >= 0 {
		// No request line holds one; "/login, /x" is two lines of the
		// header joined by a proxy in front (the gateway's and the
		// client's own), which agreed cannot see as two.
		return nil, errBadRequest("bad original URI " + quoteCut(uri) + ": a request target holds no space" + joined("URI"))
	}
	if err := parseURI(uri, &o.u); err != nil {
		reason := err.Error()
		var ue *url.Error
		if errors.As(err, &ue) {
			reason = ue.Err.Error() // without the URI, quoted (cut) below
		}
		return nil, errBadRequest("bad original URI " + quoteCut(uri) + ": " + reason)
	}
	if _, q, ok := strings.Cut(full, "?"); ok && frag {
		o.u.RawQuery = q
	}
	method, err := agreed(r.Header, keyForwardedMethod, "X-Forwarded-Method", keyOriginalMethod, "X-Original-Method", strings.EqualFold)
	if err != nil {
		return nil, err
	}
	switch {
	case method == "":
		method = r.Method
	case !httpguts.ValidHeaderFieldName(method):
		// A method is one token (RFC 9110, 9.1): "POST, GET" is two
		// lines joined, as above, and would match no rule for POST.
		return nil, errBadRequest("bad original method " + quoteCut(method) + ": an HTTP method is one token" + joined("method"))
	}
	host, err := agreed(r.Header, keyForwardedHost, "X-Forwarded-Host", "", "", nil)
	if err != nil {
		return nil, err
	}
	orig := &o.r
	*orig = *r
	orig.Method = strings.ToUpper(method)
	orig.URL = &o.u
	orig.RequestURI = uri
	if host != "" {
		orig.Host = host
	}
	return orig, nil
}

// agreed returns what the gateway says of one part of the original
// request: the first non-empty line of header a (in canonical form;
// aName as the docs spell it), else of header b ("": none), or "" when
// neither is sent. Gateways pass the client's own headers on beside the
// ones they set, so a line that says otherwise (same, for two values;
// nil: equal) is refused, naming both: were one of them preferred, a
// client could add the preferred spelling (X-Forwarded-Uri beside a
// gateway's X-Original-URI), or the header once more, and choose the
// request its rules see.
func agreed(h http.Header, a, aName, b, bName string, same func(x, y string) bool) (string, error) {
	v, vName := "", ""
	names := [2]string{aName, bName}
	for i, k := range [2]string{a, b} {
		name := names[i]
		if k == "" {
			continue
		}
		for _, x := range h[k] {
			switch {
			case x == "":
			case vName == "":
				v, vName = x, name
			case x != v && (same == nil || !same(v, x)):
				return "", errBadRequest(vName + " " + quoteCut(v) + " and " + name + " " + quoteCut(x) +
					" disagree: the gateway must send the original request's one value, set by itself (never pass the client's own on)")
			}
		}
	}
	return v, nil
}

// joined ends the message refusing an original method or URI that is no
// one request's.
func joined(what string) string {
	return "; two values joined into one line (\", \") are two requests': the gateway must send the original request's one " + what + ", set by itself"
}

// sameURI reports whether two original URIs are one as originalRequest
// reads them: the same path, cut at a '#' (a #fragment after the path is
// no part of the request), and the same query, read whole, past a '#'
// too (Go's server reads it so).
func sameURI(x, y string) bool {
	return x == y || uriPath(x) == uriPath(y) && uriQuery(x) == uriQuery(y)
}

// uriPath and uriQuery are the path and the query originalRequest reads
// in an original URI ("": none).
func uriPath(u string) string {
	u, _, _ = strings.Cut(u, "#")
	u, _, _ = strings.Cut(u, "?")
	return u
}

func uriQuery(u string) string {
	_, q, ok := strings.Cut(u, "?")
	if !ok {
		return "\x00" // no query, which no query's text is
	}
	return q
}

// parseURI sets *u to url.ParseRequestURI(uri), without allocating for
// the common kind: a path of letters, digits and -._~$&+,/:;=@ (nothing
// to unescape or escape) and a query of visible ASCII. Any other goes
// through url.ParseRequestURI (FuzzParseURI compares the two).
func parseURI(uri string, u *url.URL) error {
	_, query, _ := strings.Cut(uri, "?")
	fast := len(uri) > 0 && uri[0] == '/'
	for i := 0; fast && i < len(query); i++ {
		fast = ' ' < query[i] && query[i] < 0x7f
	}
	if fast && h1.ParseTarget(uri, u) {
		return nil
	}
	pu, err := url.ParseRequestURI(uri)
	if err != nil {
		return err
	}
	*u = *pu
	return nil
}

// ruleView is one rule in GET /v1/rules.
type ruleView struct {
	Name      string       `json:"name"`
	Match     matchView    `json:"match"`
	Key       []rules.Part `json:"key"`
	Algorithm string       `json:"algorithm"`
	Rate      string       `json:"rate"`
	Burst     int64        `json:"burst"`
	Segments  int          `json:"segments,omitempty"`
	Action    rules.Action `json:"action"`
	MaxDelay  string       `json:"max_delay,omitempty"`
}

type matchView struct {
	Methods         []string `json:"methods,omitempty"`
	Path            string   `json:"path,omitempty"`
	CaseInsensitive bool     `json:"case_insensitive,omitempty"`
}

// rules answers GET /v1/rules: {"rules":[…]} in config order, each with its
// name, match, key parts, algorithm, rate ("N/UNIT"), burst, segments
// (sliding_window_counter only), action and max_delay (action delay only).
func (h *Handler) rules(w http.ResponseWriter, r *http.Request) {
	set := h.o.Engine().Rules()
	out := struct {
		Rules []ruleView `json:"rules"`
	}{Rules: make([]ruleView, 0, len(set.Rules))}
	for _, rl := range set.Rules {
		v := ruleView{
			Name:      rl.Name,
			Match:     matchView{Methods: rl.Methods, Path: rl.Path, CaseInsensitive: rl.Fold},
			Key:       rl.Key,
			Algorithm: rl.Algorithm.String(),
			Rate:      rl.Limit.String(),
			Burst:     rl.Limit.BurstOrRate(),
			Action:    rl.Action,
		}
		if rl.Algorithm == sluice.SlidingWindowCounter {
			v.Segments = max(rl.Limit.Segments, 1)
		}
		if rl.Action == rules.Delay {
			v.MaxDelay = rl.MaxDelay.String()
		}
		out.Rules = append(out.Rules, v)
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		h.fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(append(b, '\n'))
}
