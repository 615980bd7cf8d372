package httplimit

import (
	"bufio"
	"net"
	"net/http"

	"github.com/sluicehq/sluice"
)

// deny answers a request denied by the rule named rule: what the
// DenyHandler writes, or, without one or if it wrote nothing, WriteLimited's
// 429. A DenyHandler that only counts or logs must not leave the answer to
// net/http, which would send an empty 200.
func (m *middleware) deny(w http.ResponseWriter, r *http.Request, rule string, d sluice.Decision) {
	if m.opts.DenyHandler == nil {
		WriteLimited(w, rule, d)
		return
	}
	dw := &denyWriter{ResponseWriter: w}
	m.opts.DenyHandler(dw, r, d)
	if !dw.answered {
		WriteLimited(w, rule, d)
	}
}

// denyWriter is the ResponseWriter a DenyHandler is given: it notes
// whether the handler answered (a final status, a body, a flush or a
// hijack). It flushes and hijacks through http.ResponseController, and
// unwraps for the rest.
type denyWriter struct {
	http.ResponseWriter
	answered bool
}

func (w *denyWriter) WriteHeader(code int) {
	if code >= 200 { // not an informational 1xx (103 Early Hints)
		w.answered = true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *denyWriter) Write(b []byte) (int, error) {
	w.answered = true
	return w.ResponseWriter.Write(b)
}

func (w *denyWriter) Flush() { w.FlushError() }

func (w *denyWriter) FlushError() error {
	err := http.NewResponseController(w.ResponseWriter).Flush()
	if err == nil {
		w.answered = true
	}
	return err
}

func (w *denyWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		w.answered = true
	}
	return conn, rw, err
}

func (w *denyWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
