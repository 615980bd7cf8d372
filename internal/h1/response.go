package h1

import (
	"bufio"
	"math"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// response is the fast front's http.ResponseWriter (and http.Flusher). It
// writes what net/http's server writes for the same handler calls: a
// Content-Length when the handler set one or finished within the first
// 2 KiB (else chunked on HTTP/1.1, or the body up to the close on
// HTTP/1.0), a Date, a sniffed Content-Type when none was set, no body for
// HEAD, 204, 304 and 1xx, 1xx answers written at once, trailers (declared
// in Trailer, or with http.TrailerPrefix) after a chunked body, and
// Connection: close when the connection closes after it.
type response struct {
	bw     *bufio.Writer
	req    *http.Request
	h      http.Header // the handler's map
	snap   http.Header // h at WriteHeader, when the head is not written at once: snapH
	status int
	cl     int64 // the declared Content-Length, -1: none
	n      int64 // body bytes the handler wrote
	buf    []byte
	err    error // the first write error: the client went away

	wroteHeader, committed, chunked, done bool
	closeAfter                            bool // close the connection after the answer
	trailers                              []string

	// Kept from answer to answer on a connection (reset, release): the
	// handler's map, and the snapshot's map and values.
	keepH, snapH http.Header
	snapVals     []string
}

// reset readies w for the answer to r: the maps of the previous answer
// are reused, cleared (release). A ResponseWriter is not used after its
// handler returns.
func (w *response) reset(bw *bufio.Writer, r *http.Request) {
	h, snapH, snapVals := w.keepH, w.snapH, w.snapVals
	if h == nil {
		h = make(http.Header)
	}
	*w = response{bw: bw, req: r, h: h, cl: -1, buf: w.buf[:0], keepH: h, snapH: snapH, snapVals: snapVals}
}

// release clears what the answer refers to once it is written, so that
// an idle connection pins none of it; a map grown unusually large is
// dropped (clear costs its size).
func (w *response) release() {
	for _, m := range [...]*http.Header{&w.keepH, &w.snapH} {
		if len(*m) > 32 {
			*m = nil
		} else {
			clear(*m)
		}
	}
	if n := cap(w.snapVals); n > maxStrs {
		w.snapVals = nil
	} else {
		clear(w.snapVals[:n])
	}
	w.req, w.h, w.snap, w.trailers = nil, nil, nil, nil
}

// snapshot sets w.snap to a copy of w.h, as w.h.Clone() would make it,
// in the maps and values kept from answer to answer.
func (w *response) snapshot() {
	nv := 0
	for _, vv := range w.h {
		nv += len(vv)
	}
	if cap(w.snapVals) < nv {
		w.snapVals = make([]string, nv)
	}
	sv := w.snapVals[:nv]
	if w.snapH == nil {
		w.snapH = make(http.Header, len(w.h))
	}
	h2 := w.snapH
	for k, vv := range w.h {
		if vv == nil {
			h2[k] = nil // Clone keeps a nil value nil
			continue
		}
		n := copy(sv, vv)
		h2[k] = sv[:n:n]
		sv = sv[n:]
	}
	w.snap = h2
}

// bufferBeforeChunking is net/http's: a handler that ends within it gets a
// Content-Length.
const bufferBeforeChunking = 2048

func (w *response) Header() http.Header { return w.h }

func (w *response) WriteHeader(code int) {
	if w.wroteHeader {
		return
	}
	if code < 100 || code > 999 {
		panic("h1: invalid WriteHeader code " + strconv.Itoa(code))
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		// 1xx: written and flushed at once, as net/http does, and as
		// it does without framing headers: a 1xx has no content.
		hw := newHeadWriter(w.bw)
		w.writeStatus(&hw, code)
		writeHeaders(&hw, w.h, noBodyFraming)
		hw.str("\r\n")
		hw.done()
		w.flushConn()
		return
	}
	w.wroteHeader, w.status = true, code
	if cl := w.h["Content-Length"]; len(cl) > 0 && cl[0] != "" {
		if v, ok := parseLength(cl[0], math.MaxInt64); ok {
			w.cl = v // digits only, the common spelling: no ParseInt
		} else if v, err := strconv.ParseInt(cl[0], 10, 64); err == nil && v >= 0 {
			w.cl = v
		} else {
			delete(w.h, "Content-Length")
		}
	}
	_, typed := w.h["Content-Type"]
	if w.cl >= 0 && (typed || w.cl == 0) || !bodyAllowed(code) {
		w.commit(nil) // nothing left to decide (length, type): no snapshot needed
		return
	}
	w.snapshot()
}

// noBodyFraming skips the headers net/http leaves out of a 1xx answer
// (its excludedHeadersNoBody).
func noBodyFraming(k string) bool { return k == "Content-Length" || k == "Transfer-Encoding" }

func (w *response) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if len(p) == 0 {
		return 0, w.err
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if w.cl >= 0 && w.n+int64(len(p)) > w.cl {
		return 0, http.ErrContentLength
	}
	w.n += int64(len(p))
	if !w.committed {
		if len(w.buf)+len(p) <= bufferBeforeChunking {
			w.buf = append(w.buf, p...)
			return len(p), nil
		}
		if len(w.buf) == 0 {
			w.commit(p) // writes p
			return len(p), w.err
		}
		w.commit(w.buf)
	}
	w.writeBody(p)
	return len(p), w.err
}

func (w *response) Flush() { w.FlushError() }

// FlushError is what http.ResponseController.Flush calls.
func (w *response) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(w.buf)
	}
	w.flushConn()
	return w.err
}

func (w *response) flushConn() {
	if err := w.bw.Flush(); err != nil && w.err == nil {
		w.err = err
	}
}

// writeBody writes p after a committed head (dropping it for HEAD).
func (w *response) writeBody(p []byte) {
	if w.req.Method == http.MethodHead || len(p) == 0 {
		return
	}
	var err error
	if w.chunked {
		w.bw.WriteString(strconv.FormatInt(int64(len(p)), 16))
		w.bw.WriteString("\r\n")
		w.bw.Write(p)
		_, err = w.bw.WriteString("\r\n")
	} else {
		_, err = w.bw.Write(p)
	}
	if err != nil && w.err == nil {
		w.err = err // the client went away
	}
}

// commit writes the status line and headers; p is the body so far (for
// sniffing and, once the handler is done, its length), which it then
// writes.
func (w *response) commit(p []byte) {
	w.committed = true
	h := w.snap
	if h == nil {
		h = w.h
	}
	code, head := w.status, w.req.Method == http.MethodHead
	var extra [4]string // [1:]: Content-Type, Transfer-Encoding, Connection ([0]: setLength)
	setLength := false  // Content-Length: w.cl, found here
	trailerPrefixed := false
	if w.cl < 0 { // with a length there is no chunked body to carry trailers
		_, trailerPrefixed = hasPrefixedKey(h)
	}
	declared := h["Trailer"]
	for _, v := range declared {
		for f := range strings.SplitSeq(v, ",") {
			if f = textproto.TrimString(f); f != "" {
				w.trailers = append(w.trailers, http.CanonicalHeaderKey(f))
			}
		}
	}
	trailers := trailerPrefixed || len(declared) > 0
	if w.done && !trailers && bodyAllowed(code) && w.cl < 0 && (!head || len(p) > 0) {
		w.cl, setLength = int64(len(p)), true
	}
	if w.req.ProtoMajor == 1 && w.req.ProtoMinor == 0 || w.req.Close || hasToken(h["Connection"], "close") {
		w.closeAfter = true
	}
	if bodyAllowed(code) && len(p) > 0 {
		if _, typed := h["Content-Type"]; !typed {
			if ce := h["Content-Encoding"]; len(ce) == 0 || ce[0] == "" {
				extra[1] = http.DetectContentType(p)
			}
		}
	}
	switch {
	case head || !bodyAllowed(code) || code == http.StatusNoContent:
	case w.cl >= 0:
	case w.req.ProtoMinor >= 1:
		w.chunked = true
		extra[2] = "chunked"
	default:
		w.closeAfter = true
	}
	if w.closeAfter && w.req.ProtoMinor >= 1 && !hasToken(h["Connection"], "close") {
		extra[3] = "close"
	}
	hw := newHeadWriter(w.bw)
	w.writeStatus(&hw, code)
	writeHeaders(&hw, h, func(k string) bool {
		switch k {
		case "Transfer-Encoding":
			return true
		case "Connection":
			return extra[3] != ""
		case "Content-Length":
			return code == http.StatusNotModified || !bodyAllowed(code)
		case "Content-Type":
			return code == http.StatusNotModified
		}
		return strings.HasPrefix(k, http.TrailerPrefix)
	})
	if setLength {
		hw.int("Content-Length", w.cl)
	}
	for i, name := range [4]string{"", "Content-Type", "Transfer-Encoding", "Connection"} {
		if extra[i] != "" {
			hw.field(name, extra[i])
		}
	}
	if _, dated := h["Date"]; !dated {
		hw.field("Date", httpDate())
	}
	hw.str("\r\n")
	hw.done()
	w.writeBody(p)
	w.buf = w.buf[:0]
}

// finish ends the answer after the handler returned: the head if not yet
// written, the chunked body's end and trailers. It reports whether the
// connection may carry another request.
func (w *response) finish() bool {
	w.done = true
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(w.buf)
	}
	if w.chunked {
		hw := newHeadWriter(w.bw)
		hw.str("0\r\n")
		for _, k := range w.trailers {
			for _, v := range w.h[k] {
				hw.field(k, v)
			}
		}
		for k, vv := range w.h {
			if strings.HasPrefix(k, http.TrailerPrefix) {
				for _, v := range vv {
					hw.field(k[len(http.TrailerPrefix):], v)
				}
			}
		}
		hw.str("\r\n")
		hw.done()
	}
	if w.cl >= 0 && w.n != w.cl && bodyAllowed(w.status) && w.req.Method != http.MethodHead {
		w.closeAfter = true // the body is short of its length: the client must see the end
	}
	return !w.closeAfter && w.err == nil
}

func (w *response) writeStatus(hw *headWriter, code int) {
	if w.req.ProtoMinor == 0 {
		hw.str("HTTP/1.0 ")
	} else {
		hw.str("HTTP/1.1 ")
	}
	if code < len(statusLines) && statusLines[code] != "" {
		hw.str(statusLines[code])
		return
	}
	hw.str(strconv.Itoa(code))
	hw.str(" status code ") // as net/http words a code it does not name
	hw.str(strconv.Itoa(code))
	hw.str("\r\n")
}

// statusLines are "200 OK\r\n" and the like for the codes net/http names.
var statusLines = func() (t [600]string) {
	for code := 100; code < len(t); code++ {
		if text := http.StatusText(code); text != "" {
			t[code] = strconv.Itoa(code) + " " + text + "\r\n"
		}
	}
	return t
}()

// writeHeaders writes h except the keys skip reports (nil: none) and
// names net/http would not write; values as net/http writes them
// (newlines become spaces, trimmed).
func writeHeaders(hw *headWriter, h http.Header, skip func(string) bool) {
	for k, vv := range h {
		if skip != nil && skip(k) || !validName(k) {
			continue
		}
		for _, v := range vv {
			hw.field(k, v)
		}
	}
}

var newlineToSpace = strings.NewReplacer("\n", " ", "\r", " ")

// plainValue reports whether v is written as it is: no CR or LF, and no
// space or tab to trim at either end (the common case, checked in one
// pass).
func plainValue(v string) bool {
	if v == "" {
		return true
	}
	if c := v[0]; c == ' ' || c == '\t' {
		return false
	}
	if c := v[len(v)-1]; c == ' ' || c == '\t' {
		return false
	}
	for ; len(v) >= 8; v = v[8:] {
		w := v[:8]
		// Eight bytes at once: a byte below 0x0e (CR, LF, also a tab
		// or another control byte) is looked at alone.
		if hasBelow(word(w), 0x0e) && hasNewline(w) {
			return false
		}
	}
	return !hasNewline(v)
}

func hasNewline(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c == '\r' || c == '\n' {
			return true
		}
	}
	return false
}

func hasPrefixedKey(h http.Header) (string, bool) {
	for k := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			return k, true
		}
	}
	return "", false
}

func bodyAllowed(code int) bool {
	return !(code >= 100 && code <= 199 || code == http.StatusNoContent || code == http.StatusNotModified)
}

// httpDate is time.Now in http.TimeFormat, formatted once a second.
func httpDate() string {
	now := time.Now()
	if d := date.Load(); d != nil && d.sec == now.Unix() {
		return d.s
	}
	d := &dateCache{sec: now.Unix(), s: now.UTC().Format(http.TimeFormat)}
	date.Store(d)
	return d.s
}

type dateCache struct {
	sec int64
	s   string
}

var date atomic.Pointer[dateCache]
