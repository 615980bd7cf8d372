package proxy

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
)

// readSimpleResponse reads the upstream's answer to a GET on the fast path
// when it is of the simple kind most answers are — an HTTP/1.1 status line
// with a final status other than 204 and 304, one Content-Length, no
// Transfer-Encoding or Trailer, every line ending in CRLF (a bare LF is
// seen before more bytes are waited for), header names of
// token characters and values of visible characters, spaces and tabs, the
// whole head within the connection's read buffer — without the textproto
// reader and transfer decoding of http.ReadResponse, which cost a tenth
// of the proxy's CPU under load (BENCHMARKS.md). Unlike http.ReadResponse
// it keeps a Connection header that says close, so that the headers it
// names are dropped too. ok false: not of that
// kind, nothing consumed; the caller reads it with http.ReadResponse. An
// error is the connection's (a read error or timeout, or the header
// budget). FuzzSimpleResponse checks it against http.ReadResponse.
//
// The answer is built in resp, its header in h (cleared first), the
// header's values in *strs (grown as needed, up to maxStrs kept): the fast
// path passes its connection's own, reused from answer to answer. The
// values are needed until the handler has called WriteHeader, when the
// server copies the header (net/http, its HTTP/2 server and the h1 front
// all do); the connection goes back to the pool only after that.
func readSimpleResponse(br *bufio.Reader, resp *http.Response, h http.Header, strs *[]string) (ok bool, err error) {
	scanned := 0
	var head []byte
	for head == nil {
		if _, err := br.Peek(scanned + 1); err != nil {
			return false, err
		}
		buf, _ := br.Peek(br.Buffered())
		i := scanned
		if i >= 3 {
			i -= 3
		}
		end := bytes.Index(buf[i:], []byte("\r\n\r\n"))
		if end >= 0 {
			head = buf[:i+end+4]
			break
		}
		if bareLF(buf, scanned) {
			// A line ending in a bare LF, which http.ReadResponse reads
			// as a line's end (RFC 9112 §2.2 allows it): such a head
			// may be whole already, and a CRLFCRLF never come.
			return false, nil
		}
		if len(buf) >= br.Size() {
			return false, nil
		}
		scanned = len(buf)
	}
	ok = parseSimpleResponse(head, resp, h, strs)
	if ok {
		br.Discard(len(head))
	}
	return ok, nil
}

// bareLF reports whether buf holds, from index from on, an LF without a
// CR before it.
func bareLF(buf []byte, from int) bool {
	for i := from; i < len(buf); i++ {
		j := bytes.IndexByte(buf[i:], '\n')
		if j < 0 {
			return false
		}
		i += j
		if i == 0 || buf[i-1] != '\r' {
			return true
		}
	}
	return false
}

// parseSimpleResponse parses a head ending in CRLFCRLF into resp and h;
// see readSimpleResponse.
func parseSimpleResponse(head []byte, resp *http.Response, h http.Header, kept *[]string) bool {
	clear(h)
	if len(head) < 12 || string(head[:9]) != "HTTP/1.1 " {
		return false
	}
	s := string(head)
	eol := strings.Index(s, "\r\n")
	line := s[:eol]
	s = s[eol+2:]
	if len(line) < 12 || len(line) > 12 && line[12] != ' ' {
		return false
	}
	code := 0
	for _, c := range []byte(line[9:12]) {
		if c < '0' || c > '9' {
			return false
		}
		code = code*10 + int(c-'0')
	}
	if code < 200 || code == http.StatusNoContent || code == http.StatusNotModified {
		return false
	}
	for i := 12; i < len(line); i++ {
		if c := line[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	status := line[9:]
	lines := strings.Count(s, "\r\n") - 1
	if cap(*kept) < lines {
		*kept = make([]string, lines)
	}
	strs := (*kept)[:lines]
	if lines > maxStrs {
		*kept = nil // not kept: an unusually long head
	}
	cl := int64(-1)
	closes := false
	for len(s) > 2 {
		eol := strings.Index(s, "\r\n")
		line := s[:eol]
		s = s[eol+2:]
		colon := strings.IndexByte(line, ':')
		if colon <= 0 {
			return false
		}
		k, v := line[:colon], trimOWS(line[colon+1:])
		for i := 0; i < len(k); i++ {
			if !tokenChar(k[i]) {
				return false
			}
		}
		for i := 0; i < len(v); i++ {
			if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
				return false
			}
		}
		if !canonicalKey(k) {
			k = textproto.CanonicalMIMEHeaderKey(k)
		}
		switch k {
		case "Transfer-Encoding", "Trailer":
			return false
		case "Content-Length":
			if cl >= 0 || v == "" || len(v) > 18 {
				return false
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || v[0] < '0' || v[0] > '9' {
				return false
			}
			cl = n
		case "Connection":
			if tokenIn([]string{v}, "close") {
				closes = true
			}
		}
		if vv, seen := h[k]; seen {
			h[k] = append(vv, v)
		} else {
			strs[0] = v
			h[k] = strs[:1:1]
			strs = strs[1:]
		}
	}
	if cl < 0 {
		return false
	}
	*resp = http.Response{
		Status: status, StatusCode: code, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, ContentLength: cl, Close: closes,
	}
	return true
}

// maxStrs bounds the values' backing array a connection keeps.
const maxStrs = 128

// trimOWS trims spaces and tabs at both ends, as strings.Trim(s, " \t").
func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// canonicalKey reports whether k, of token characters, is already in
// canonical form (upper case after '-' and at the start, lower case
// elsewhere), so textproto.CanonicalMIMEHeaderKey would return it as it is.
func canonicalKey(k string) bool {
	upper := true
	for i := 0; i < len(k); i++ {
		c := k[i]
		if upper && 'a' <= c && c <= 'z' || !upper && 'A' <= c && c <= 'Z' {
			return false
		}
		upper = c == '-'
	}
	return true
}

func tokenChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// lenBody is a body of known length read from the connection's buffer:
// io.EOF with its last bytes, io.ErrUnexpectedEOF if the connection ends
// before.
type lenBody struct {
	br *bufio.Reader
	n  int64
}

func (b *lenBody) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	n, err := b.br.Read(p)
	b.n -= int64(n)
	switch {
	case b.n == 0:
		return n, io.EOF
	case err == io.EOF:
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *lenBody) Close() error { return nil }
