package listener

import (
	"net/http"
	"strings"
)

// closeDoubtful closes the connection after answering an HTTP/1 request
// whose framing another hop may have read another way, so that no bytes
// after it are ever read as a request of their own (request smuggling):
//
//   - an HTTP/1.1 request with a chunked body: net/http reads it by its
//     chunks and drops a Content-Length sent beside them (never
//     forwarded), but does not tell the handler one came, and RFC 9112
//     §6.3 asks a server that takes such a request to close the
//     connection after it;
//   - an HTTP/1.0 request that asked to keep the connection: net/http
//     ignores a Transfer-Encoding on HTTP/1.0 without telling the
//     handler, and RFC 9112 §6.1 asks a server to close the connection
//     after such a request.
//
// Other requests pass straight to h. The close is asked for with
// Connection: close on the final answer, which net/http honours, set
// when the final answer starts (not before: a 1xx answer would carry it,
// and httputil.ReverseProxy clears the header after one), or when h
// returns having written nothing.
func closeDoubtful(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 1 || r.ProtoMinor > 0 && len(r.TransferEncoding) == 0 ||
			r.ProtoMinor == 0 && !keepAlive10(r.Header["Connection"]) {
			h.ServeHTTP(w, r)
			return
		}
		cw := &closingWriter{ResponseWriter: w}
		h.ServeHTTP(cw, r)
		if !cw.started {
			w.Header()["Connection"] = []string{"close"}
		}
	})
}

// keepAlive10 reports an HTTP/1.0 request's Connection asking for
// keep-alive, as net/http reads it.
func keepAlive10(conn []string) bool {
	for _, v := range conn {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "keep-alive") {
				return true
			}
		}
	}
	return false
}

// closingWriter sets Connection: close on the final answer. Unwrap gives
// http.ResponseController (hijack, deadlines) the writer under it.
type closingWriter struct {
	http.ResponseWriter
	started bool // the final answer (or a 101) was started
}

func (w *closingWriter) WriteHeader(code int) {
	if !w.started && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.started = true
		if code >= 200 {
			w.Header()["Connection"] = []string{"close"}
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *closingWriter) Write(b []byte) (int, error) {
	if !w.started {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

func (w *closingWriter) Flush() {
	if !w.started {
		w.WriteHeader(http.StatusOK)
	}
	http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *closingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
