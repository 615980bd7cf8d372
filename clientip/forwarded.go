package clientip

import (
	"errors"
	"fmt"
	"golang.org/x/net/http/httpguts"
	"strings"
)

// Element is one forwarded-element of an RFC 7239 Forwarded header: the
// values of its for, by, host and proto parameters, unquoted ("" when
// absent). Extension parameters are checked for syntax and dropped.
type Element struct {
	For, By, Host, Proto string
}

// ErrMalformed is wrapped by ParseForwarded errors.
var ErrMalformed = errors.New("clientip: malformed Forwarded header")

// ParseForwarded parses the value of a Forwarded header (RFC 7239 §4):
// comma-separated elements of semicolon-separated token=value pairs, where
// a value is a token or a quoted string. Parameter names are
// case-insensitive; a parameter given twice in one element is an error;
// empty elements are skipped; whitespace around separators is allowed.
func ParseForwarded(v string) ([]Element, error) {
	parts, ok := splitElements(v)
	if !ok {
		return nil, fmt.Errorf("%w: unterminated quoted string", ErrMalformed)
	}
	var out []Element
	for _, p := range parts {
		if strings.TrimSpace(p) == "" {
			continue
		}
		e, err := parseElement(p)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// splitElements splits v at the commas outside quoted strings. It reports
// false when a quoted string is not terminated.
func splitElements(v string) ([]string, bool) {
	var out []string
	start, quoted := 0, false
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == ',':
			out = append(out, v[start:i])
			start = i + 1
		}
	}
	if quoted {
		return nil, false
	}
	return append(out, v[start:]), true
}

// parseElement parses one forwarded-element (no commas outside quotes).
func parseElement(s string) (Element, error) {
	var e Element
	var seen [4]bool
	for s = trimOWS(s); s != ""; {
		if s[0] == ';' { // an empty pair
			s = trimOWS(s[1:])
			continue
		}
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return Element{}, fmt.Errorf("%w: %q: want name=value", ErrMalformed, s)
		}
		name := strings.TrimRight(s[:eq], " \t")
		if !httpguts.ValidHeaderFieldName(name) {
			return Element{}, fmt.Errorf("%w: %q is not a parameter name", ErrMalformed, name)
		}
		s = strings.TrimLeft(s[eq+1:], " \t")
		var val string
		if s != "" && s[0] == '"' {
			var err error
			val, s, err = unquote(s)
			if err != nil {
				return Element{}, err
			}
		} else {
			end := 0
			for end < len(s) && s[end] != ';' && s[end] != ' ' && s[end] != '\t' {
				end++
			}
			val, s = s[:end], s[end:]
			if !httpguts.ValidHeaderFieldName(val) {
				return Element{}, fmt.Errorf("%w: value %q of %s must be a token or a quoted string", ErrMalformed, val, name)
			}
		}
		var idx int
		var dst *string
		switch strings.ToLower(name) {
		case "for":
			idx, dst = 0, &e.For
		case "by":
			idx, dst = 1, &e.By
		case "host":
			idx, dst = 2, &e.Host
		case "proto":
			idx, dst = 3, &e.Proto
		default:
			idx = -1
		}
		if idx >= 0 {
			if seen[idx] {
				return Element{}, fmt.Errorf("%w: parameter %s given twice in one element", ErrMalformed, strings.ToLower(name))
			}
			seen[idx] = true
			*dst = val
		}
		s = trimOWS(s)
		if s == "" {
			break
		}
		if s[0] != ';' {
			return Element{}, fmt.Errorf("%w: %q: want ; between parameters", ErrMalformed, s)
		}
		s = trimOWS(s[1:])
	}
	return e, nil
}

// unquote reads the quoted string at the start of s and returns its value
// and the rest of s.
func unquote(s string) (val, rest string, err error) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		if c == '\\' && i+1 < len(s) { // quoted-pair: \ HTAB / SP / VCHAR / obs-text
			i++
			c = s[i]
			if c < ' ' && c != '\t' || c == 0x7f {
				return "", "", fmt.Errorf("%w: control character in quoted string", ErrMalformed)
			}
			b.WriteByte(c)
			continue
		}
		switch {
		case c == '"':
			return b.String(), s[i+1:], nil
		case c < ' ' && c != '\t' || c == 0x7f:
			return "", "", fmt.Errorf("%w: control character in quoted string", ErrMalformed)
		default:
			b.WriteByte(c)
		}
	}
	return "", "", fmt.Errorf("%w: unterminated quoted string", ErrMalformed)
}

func trimOWS(s string) string { return strings.Trim(s, " \t") }

// String formats e as one forwarded-element, quoting values that are not
// tokens, such as `for="[2001:db8::1]:80";proto=https`. ParseForwarded
// reads it back unchanged, provided the values hold no control characters
// (bytes below 0x20 other than tab, and 0x7F), which no quoted string can
// carry: such an element is written as it is, and does not parse.
func (e Element) String() string {
	var b strings.Builder
	for _, kv := range [...][2]string{{"for", e.For}, {"by", e.By}, {"host", e.Host}, {"proto", e.Proto}} {
		if kv[1] == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(';')
		}
		b.WriteString(kv[0])
		b.WriteByte('=')
		if httpguts.ValidHeaderFieldName(kv[1]) {
			b.WriteString(kv[1])
			continue
		}
		b.WriteByte('"')
		for i := 0; i < len(kv[1]); i++ {
			if c := kv[1][i]; c == '"' || c == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(kv[1][i])
		}
		b.WriteByte('"')
	}
	return b.String()
}
