package server

import (
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

// The /v1/check body is decoded by hand: it is the hot path of the decision
// API, and encoding/json's reflection and decoder allocations cost more
// than the decision itself. The grammar is JSON's (RFC 8259), restricted
// to what the endpoint accepts:
//
//   - one object, with only whitespace around it;
//   - fields "rule" and "key" (strings) and "cost" (a whole number in
//     int64, however spelled: 1e1 and 10.0 are 10, which encoding/json
//     refuses into an int64),
//     spelled exactly (encoding/json would also take "Rule"), each at most
//     once (encoding/json would take the last of a repeated field, where
//     another parser in front of Sluice may have read the first);
//   - no null values, no other fields.
//
// Strings are unescaped as encoding/json does, but must be text (RFC 8259
// section 8.1, RFC 7493 section 2.1): invalid UTF-8 and an escaped lone
// surrogate (\ud800) are refused, where encoding/json reads each as
// U+FFFD, so that keys "caf\xe9" and "caf\xe8" (Latin-1) would share one
// counter. FuzzParseCheck holds it to encoding/json's answers otherwise.

// errSyntax and friends are the parse failures; check wraps them in a 400.
var (
	errEmpty   = errors.New("empty body: want {\"rule\":NAME,\"key\":STRING,\"cost\":N}")
	errTrail   = errors.New("body must hold one JSON object")
	errNoObj   = errors.New("body must be a JSON object")
	errSyntax  = errors.New("bad JSON")
	errCostInt = errors.New(`field "cost" must be a whole number`)
	errCostBig = errors.New(`field "cost" is too large (at most ` + strconv.FormatInt(math.MaxInt64, 10) + `)`)
	errCostNeg = errors.New(`"cost" must not be negative`)
)

// duplicateFieldError names a field given twice.
type duplicateFieldError struct{ name string }

func (e *duplicateFieldError) Error() string {
	return "field " + strconv.Quote(e.name) + " given twice"
}

// textError says where a string of the body is not text: a byte of
// invalid UTF-8 at offset, or (surrogate ≠ 0) an escaped lone surrogate.
type textError struct {
	field     string // "" for a field name
	offset    int
	b         byte
	surrogate rune
}

func (e *textError) Error() string {
	what := "a field name"
	if e.field != "" {
		what = "field " + strconv.Quote(e.field)
	}
	if e.surrogate != 0 {
		return what + ` holds \u` + strconv.FormatInt(int64(e.surrogate), 16) + ` alone (offset ` + strconv.Itoa(e.offset) +
			` of the body), half of a UTF-16 surrogate pair and no character; send a key that is not text encoded (hex, base64)`
	}
	return what + " is not valid UTF-8 (byte 0x" + strconv.FormatInt(int64(e.b), 16) + " at offset " + strconv.Itoa(e.offset) +
		" of the body); send a key that is not text encoded (hex, base64)"
}

// unknownFieldError names a field the endpoint does not take.
type unknownFieldError struct{ name string }

func (e *unknownFieldError) Error() string {
	return "unknown field " + quoteCut(e.name) + ` (want "rule", "key" and "cost")`
}

// parseCheck decodes b into req, which holds the defaults (Cost 1).
func parseCheck(b []byte, req *checkRequest) error {
	p := parser{b: b}
	p.ws()
	if p.i == len(b) {
		return errEmpty
	}
	if b[p.i] != '{' {
		return errNoObj
	}
	p.i++
	p.ws()
	if p.peek() == '}' {
		p.i++
		return p.end()
	}
	var seen uint8 // bits: rule, key, cost
	for {
		p.ws()
		name, ok := p.str()
		if !ok {
			return p.fail("")
		}
		var bit uint8
		switch string(name) {
		case "rule":
			bit = 1
		case "key":
			bit = 2
		case "cost":
			bit = 4
		}
		if seen&bit != 0 {
			return &duplicateFieldError{name: string(name)}
		}
		seen |= bit
		p.ws()
		if p.peek() != ':' {
			return errSyntax
		}
		p.i++
		p.ws()
		switch field := string(name); field {
		case "rule", "key":
			if p.peek() != '"' {
				if p.peek() == 0 {
					return errSyntax
				}
				return errors.New(`field "` + field + `" must be a string`)
			}
			v, ok := p.str()
			if !ok && field == "rule" {
				return p.fail("rule") // a constant: field would escape, per request
			} else if !ok {
				return p.fail("key")
			}
			if field == "rule" {
				req.Rule = string(v)
			} else {
				req.Key = string(v)
			}
		case "cost":
			n, err := p.int()
			if err != nil {
				return err
			}
			req.Cost = n
		default:
			return &unknownFieldError{name: string(name)}
		}
		p.ws()
		switch p.peek() {
		case ',':
			p.i++
		case '}':
			p.i++
			return p.end()
		default:
			return errSyntax
		}
	}
}

type parser struct {
	b   []byte
	i   int
	buf []byte     // unescaped string scratch
	bad *textError // why the last str failed, when the string was not text
}

// fail is the error of a str that failed reading field's value ("": a
// name).
func (p *parser) fail(field string) error {
	if p.bad == nil {
		return errSyntax
	}
	p.bad.field = field
	return p.bad
}

func (p *parser) peek() byte {
	if p.i < len(p.b) {
		return p.b[p.i]
	}
	return 0
}

func (p *parser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) end() error {
	p.ws()
	if p.i != len(p.b) {
		return errTrail
	}
	return nil
}

// str reads a JSON string at p.i and returns its unescaped value, valid
// only until the next call.
func (p *parser) str() ([]byte, bool) {
	if p.peek() != '"' {
		return nil, false
	}
	p.i++
	start := p.i
	// Fast path: no escapes, ASCII or valid UTF-8.
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			v := p.b[start:p.i]
			p.i++
			return v, true
		case c == '\\' || c < 0x20 || c >= utf8.RuneSelf:
			return p.slowStr(start)
		}
		p.i++
	}
	return nil, false
}

func (p *parser) slowStr(start int) ([]byte, bool) {
	out := append(p.buf[:0], p.b[start:p.i]...)
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			p.buf = out
			return out, true
		case c < 0x20:
			return nil, false
		case c == '\\':
			p.i++
			if p.i >= len(p.b) {
				return nil, false
			}
			e := p.b[p.i]
			p.i++
			switch e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := p.hex4()
				if !ok {
					return nil, false
				}
				if utf16.IsSurrogate(r) {
					// A high surrogate followed by an escaped low one is one
					// rune; anything else is no character (encoding/json
					// reads it as U+FFFD).
					at := p.i - 6
					if p.i+1 < len(p.b) && p.b[p.i] == '\\' && p.b[p.i+1] == 'u' {
						p.i += 2
						r2, ok := p.hex4()
						if !ok {
							return nil, false
						}
						if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
							out = utf8.AppendRune(out, dec)
							continue
						}
					}
					p.bad = &textError{offset: at, surrogate: r}
					return nil, false
				}
				out = utf8.AppendRune(out, r)
			default:
				return nil, false
			}
		case c < utf8.RuneSelf:
			out = append(out, c)
			p.i++
		default:
			r, size := utf8.DecodeRune(p.b[p.i:])
			if r == utf8.RuneError && size == 1 {
				p.bad = &textError{offset: p.i, b: p.b[p.i]}
				return nil, false
			}
			out = append(out, p.b[p.i:p.i+size]...)
			p.i += size
		}
	}
	return nil, false
}

func (p *parser) hex4() (rune, bool) {
	if p.i+4 > len(p.b) {
		return 0, false
	}
	var r rune
	for _, c := range p.b[p.i : p.i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	p.i += 4
	return r, true
}

// bodies recycles request body buffers.
var bodies = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// readBody reads r's body, up to limit bytes, into a pooled buffer; put it
// back with bodies.Put. Over the limit, the error is *http.MaxBytesError.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) (*[]byte, error) {
	bp := bodies.Get().(*[]byte)
	b := (*bp)[:0]
	if r.ContentLength > limit {
		*bp = b
		return bp, &http.MaxBytesError{Limit: limit}
	}
	// A body with a Content-Length is already cut there by net/http (and
	// that length is within the limit); only a chunked one needs the bound.
	var body io.Reader = r.Body
	if r.ContentLength < 0 {
		body = http.MaxBytesReader(w, r.Body, limit)
	}
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := body.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			*bp = b
			return bp, err
		}
	}
	*bp = b
	return bp, nil
}
