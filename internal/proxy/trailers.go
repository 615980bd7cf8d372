package proxy

import (
	"io"
	"net/http"

	"golang.org/x/net/http/httpguts"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/hop"
	"github.com/sluicehq/sluice/internal/rules"
)

// What of a trailer passes, either way: a request's goes upstream
// (reverse.go: rewrite) without the fields dropTrailerField names, those
// the head goes without, those a rule in force reads (ruleFields), and a
// POST's method-override headers (rules.OverrideHeader), always; an
// answer's goes to the client (fast.go: fastForward; reverse.go:
// modifyResponse and trailerBody) without those dropTrailerField names,
// nor the rate-limit fields the proxy set in its head (limitFields).
// Both are read only when a message has a trailer.

// dropTrailerField reports whether the trailer field k never passes: a
// hop-by-hop field (those of hop.Is, those the message's Connection
// header names, conn, and those spelled with '_', which CGI-style
// servers read as the one they spell: underscoredHop), or one RFC 9110
// §6.5.1 keeps out of a trailer (framing, routing, authentication,
// request modifiers: httpguts.ValidTrailerHeader), which a peer that
// merges a trailer into the headers would take for the message's own.
func dropTrailerField(k string, conn hop.Names) bool {
	return hop.Is(k) || conn.Has(k) || underscoredHop(k) || !httpguts.ValidTrailerHeader(k)
}

// dropTrailers deletes from t, an answer's trailer, the fields
// dropTrailerField names, and when limits is set (the proxy stamped the
// answer's head with its rate-limit headers: engine.Result.SetsHeaders)
// the fields of those names, limitFields.
func dropTrailers(t http.Header, conn hop.Names, limits bool) {
	for k := range t {
		if dropTrailerField(k, conn) {
			delete(t, k)
		}
	}
	if limits {
		for _, k := range limitFields {
			delete(t, k)
		}
	}
}

// limitFields are the rate-limit headers the proxy sets in the head of an
// answer a rule applied to (engine.Result.SetHeaders), in place of the
// upstream's, keyed as http.Header keys them: the upstream's of those
// names in the answer's trailer would reach the client after the proxy's,
// and a client that reads the trailer, or merges it into the head, would
// take the upstream's figures for the limiter's. Retry-After and X-RateLimit-Retry-After, which the
// proxy sets only on its own 429, pass in a trailer as in the head.
var limitFields = [...]string{
	http.CanonicalHeaderKey(httplimit.HeaderLimit), http.CanonicalHeaderKey(httplimit.HeaderRemaining),
	http.CanonicalHeaderKey(httplimit.HeaderReset), http.CanonicalHeaderKey(httplimit.HeaderPolicy),
	http.CanonicalHeaderKey(httplimit.HeaderRateLimit),
}

// ruleFields appends to dst the request headers the rules of set read,
// each once: the NAME of a header:NAME key part, and Cookie for a
// cookie:NAME part. Such a field sent in a request's trailer is one no
// rule saw (the rule found the request without it, so did not apply, or
// keyed it without it): an upstream that merges its trailer into its
// headers (Apache's MergeTrailers, Tomcat's allowedTrailerHeaders) would
// take it for the request's own, an API key no limit counted. Read once
// per request that has a trailer, so that each of its fields is looked
// for among a few names, not among every rule's parts.
func ruleFields(set *rules.Set, dst []string) []string {
	if set == nil {
		return dst
	}
	for _, r := range set.Rules {
		for _, p := range r.Key {
			name := p.Name
			switch p.Kind {
			case rules.PartHeader:
			case rules.PartCookie:
				name = "Cookie"
			default:
				continue
			}
			if !fieldIn(name, dst) {
				dst = append(dst, name)
			}
		}
	}
	return dst
}

// fieldIn reports whether the header name k is one of names as a
// CGI-style server reads them (hop.SameName): X_Api_Key is X-Api-Key.
func fieldIn(k string, names []string) bool {
	for _, n := range names {
		if hop.SameName(k, n) {
			return true
		}
	}
	return false
}

// trailerBody is an upstream answer's body as ReverseProxy reads it: once
// the body has ended (io.EOF, or Close, after which ReverseProxy reads
// the trailer), resp.Trailer, which the Transport fills in as the body
// ends with every field the upstream sent, declared or not, goes without
// those dropTrailerField names. Set only on an answer that can have a
// trailer (modifyResponse).
type trailerBody struct {
	io.ReadCloser
	resp   *http.Response
	conn   []string // the answer's Connection values
	limits bool     // the proxy set its rate-limit headers in the head (dropTrailers)
}

func (b *trailerBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		dropTrailers(b.resp.Trailer, hop.NewNames(b.conn), b.limits)
	}
	return n, err
}

func (b *trailerBody) Close() error {
	err := b.ReadCloser.Close()
	dropTrailers(b.resp.Trailer, hop.NewNames(b.conn), b.limits)
	return err
}

// connTransport is Options.Transport as ReverseProxy calls it: it keeps
// the Connection values the Transport left in each final answer for
// modifyResponse, since ReverseProxy deletes them before it, so that the
// fields they name go from the answer's trailer too (the proxy's own
// Transport's connections give those of a Connection: close as well:
// connnames.go).
type connTransport struct{ rt http.RoundTripper }

func (t connTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(r)
	if err == nil {
		if info, ok := r.Context().Value(ctxKey{}).(*forwardInfo); ok {
			info.upConn = resp.Header["Connection"]
		}
	}
	return resp, err
}
