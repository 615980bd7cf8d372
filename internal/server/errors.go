package server

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/jsonstr"
)

// apiError is an error with the HTTP status it answers.
type apiError struct {
	status int
	msg    string
	allow  string // Allow header of a 405
}

func (e *apiError) Error() string { return e.msg }

var (
	errNotFound     = &apiError{status: http.StatusNotFound, msg: "not found"}
	errUnavailable  = &apiError{status: http.StatusServiceUnavailable, msg: "store_unavailable"}
	errUnauthorized = &apiError{status: http.StatusUnauthorized, msg: "unauthorized: this endpoint needs Authorization: Bearer <the token of api.token_file>"}
	errBodyTimeout  = &apiError{status: http.StatusRequestTimeout, msg: "request body stalled: no data within body_read_timeout"}
	errCrossOrigin  = &apiError{status: http.StatusForbidden, msg: "cross-origin request refused: a browser sent it for a web page (Sec-Fetch-Site, Origin), and the decision API serves none (a page of its own host name is a DNS name rebound to it); programs send neither header"}
	// errExtendedConnect answers an extended CONNECT (RFC 8441: a
	// WebSocket over HTTP/2): the decision API tunnels nothing.
	errExtendedConnect = &apiError{status: http.StatusNotImplemented, msg: "extended_connect_unsupported: the decision API tunnels nothing (an extended CONNECT, RFC 8441, opens a WebSocket over HTTP/2)"}
	// errConnect answers any other CONNECT (CONNECT host:port, or a
	// path, which Go's HTTP/1.1 server takes as net/rpc sends it):
	// forward auth would decide on it and answer 2xx, the answer that
	// opens a tunnel. Allow names the methods some endpoint takes, as
	// the proxy's answer to a CONNECT does.
	errConnect = &apiError{status: http.StatusMethodNotAllowed, msg: "method_not_allowed: the decision API tunnels nothing (CONNECT)", allow: "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"}
	// errGone answers a request whose client went away before it was
	// decided (nginx's 499): for the access log, nobody reads it.
	errGone = &apiError{status: StatusClientClosedRequest, msg: "client_closed_request"}
)

// StatusClientClosedRequest is the status of a request whose client went
// away before it was decided: nginx's 499, "client closed request".
const StatusClientClosedRequest = 499

func errBadRequest(msg string) error { return &apiError{status: http.StatusBadRequest, msg: msg} }

// maxEcho bounds how much of a client's own input an error message quotes
// back: enough to recognise it, never a 64 KiB body or a 1 MiB header.
const maxEcho = 64

// quoteCut quotes s, cut to maxEcho bytes (on a rune boundary) and marked
// with its length when longer.
func quoteCut(s string) string {
	if len(s) <= maxEcho {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:runeCut(s, maxEcho)]) + "… (" + strconv.Itoa(len(s)) + " bytes)"
}

// maxDecoderMsg bounds a decoder's error message given back (it quotes
// the input it stumbled on): its words and maxEcho bytes or so of input.
const maxDecoderMsg = 2 * maxEcho

// msgCut cuts a decoder's error message to maxDecoderMsg bytes (on a rune
// boundary), marked with its length when longer.
func msgCut(s string) string {
	if len(s) <= maxDecoderMsg {
		return s
	}
	return s[:runeCut(s, maxDecoderMsg)] + "… (" + strconv.Itoa(len(s)) + " bytes)"
}

// maxLogValue bounds how much of a client's value a log line quotes.
const maxLogValue = 256

// logCut cuts a client's value for a log line to maxLogValue bytes (on a
// rune boundary), marked with its length when longer; the handler quotes
// what it needs to.
func logCut(s string) string {
	if len(s) <= maxLogValue {
		return s
	}
	return s[:runeCut(s, maxLogValue)] + "… (" + strconv.Itoa(len(s)) + " bytes)"
}

// runeCut returns the largest n' <= n at which s can be cut between runes.
func runeCut(s string, n int) int {
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return n
}

// encodingError returns the error answering a request whose body is sent
// with a Content-Encoding other than identity, or nil. The decision API
// reads bodies as they come and decompresses none: a gzipped body would
// be answered "bad JSON", and a plain one labelled gzip (something in
// between removed the coding and left its label) decided as if it were
// what the label says it is not. The caller sends Accept-Encoding:
// identity with it (RFC 9110, 15.5.16).
func encodingError(r *http.Request) *apiError {
	for _, v := range r.Header["Content-Encoding"] {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				return &apiError{status: http.StatusUnsupportedMediaType,
					msg: "Content-Encoding " + quoteCut(v) + " is not supported: send the body uncompressed (Content-Encoding identity, or none)"}
			}
		}
	}
	return nil
}

func errMethod(allow string) error {
	return &apiError{status: http.StatusMethodNotAllowed, msg: "method not allowed (want " + allow + ")", allow: allow}
}

// statusOf maps an error to its HTTP status: the one place the decision
// API does so (decisions themselves become statuses in engine.WriteDenied).
func statusOf(err error) int {
	var ae *apiError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &ae):
		return ae.status
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge
	default:
		return http.StatusInternalServerError
	}
}

// fail writes err as {"error":"…"} with its status.
func (h *Handler) fail(w http.ResponseWriter, err error) {
	status := statusOf(err)
	msg := err.Error()
	var ae *apiError
	if errors.As(err, &ae) && ae.allow != "" {
		w.Header().Set("Allow", ae.allow)
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		msg = "request body larger than " + strconv.FormatInt(mbe.Limit, 10) + " bytes"
	}
	if status == http.StatusInternalServerError {
		h.o.Logger.Error("decision API", "err", err)
		msg = "internal error"
	}
	b := make([]byte, 0, 32+len(msg))
	b = append(b, `{"error":`...)
	b = jsonstr.Append(b, msg)
	b = append(b, "}\n"...)
	hd := w.Header()
	hd["Content-Type"] = []string{"application/json"}
	hd["X-Content-Type-Options"] = []string{"nosniff"}
	w.WriteHeader(status)
	w.Write(b)
}
