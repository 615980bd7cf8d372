package proxy

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"
)

// ParseForwardedRFC parses a Forwarded header value as strictly as RFC
// 7239 §4 writes it, the oracle for what the proxy sends upstream (and
// for what package clientip's laxer parser must read alike):
//
//	Forwarded         = 1#forwarded-element          ; RFC 7230 §7: OWS around ","
//	forwarded-element = [ forwarded-pair ] *( ";" [ forwarded-pair ] )
//	forwarded-pair    = token "=" value               ; no whitespace
//	value             = token / quoted-string
//
// with each parameter at most once in an element (names in any case),
// and the values of §5: for= and by= a node (§6), host= a Host (RFC 7230
// §5.4: uri-host [":" port] of RFC 3986), proto= a URI scheme. It
// returns each element's parameters, names in lower case, values
// unquoted; an empty list element is skipped, as RFC 7230 asks.
func ParseForwardedRFC(v string) ([]map[string]string, error) {
	var out []map[string]string
	i := 0
	for {
		i = skipOWS(v, i)
		if i == len(v) {
			break
		}
		if v[i] == ',' {
			i++
			continue
		}
		e := map[string]string{}
		for {
			if i < len(v) && isTchar(v[i]) {
				j := i
				for j < len(v) && isTchar(v[j]) {
					j++
				}
				name := strings.ToLower(v[i:j])
				if j == len(v) || v[j] != '=' {
					return nil, fmt.Errorf("at %d: want '=' after %q", j, name)
				}
				val, next, err := rfcValue(v, j+1)
				if err != nil {
					return nil, err
				}
				if _, dup := e[name]; dup {
					return nil, fmt.Errorf("parameter %s twice in one element", name)
				}
				if err := rfcParam(name, val); err != nil {
					return nil, err
				}
				e[name], i = val, next
			}
			if i < len(v) && v[i] == ';' {
				i++
				continue
			}
			break
		}
		out = append(out, e)
		i = skipOWS(v, i)
		if i == len(v) {
			break
		}
		if v[i] != ',' {
			return nil, fmt.Errorf("at %d: want ',' or ';', got %q", i, v[i])
		}
		i++
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no element")
	}
	return out, nil
}

// rfcValue reads the token or quoted-string at v[i:].
func rfcValue(v string, i int) (val string, next int, err error) {
	if i < len(v) && v[i] == '"' {
		var b strings.Builder
		for i++; i < len(v); i++ {
			c := v[i]
			switch {
			case c == '"':
				return b.String(), i + 1, nil
			case c == '\\':
				// quoted-pair = "\" ( HTAB / SP / VCHAR / obs-text )
				if i+1 == len(v) || !qpChar(v[i+1]) {
					return "", 0, fmt.Errorf("at %d: bad quoted-pair", i)
				}
				i++
				b.WriteByte(v[i])
			case c == '\t' || c == ' ' || c == 0x21 || 0x23 <= c && c <= 0x5b || 0x5d <= c && c <= 0x7e || c >= 0x80: // qdtext
				b.WriteByte(c)
			default:
				return "", 0, fmt.Errorf("at %d: %q in a quoted string", i, c)
			}
		}
		return "", 0, fmt.Errorf("quoted string left open")
	}
	j := i
	for j < len(v) && isTchar(v[j]) {
		j++
	}
	if j == i {
		return "", 0, fmt.Errorf("at %d: value neither a token nor a quoted string", i)
	}
	return v[i:j], j, nil
}

func qpChar(c byte) bool { return c == '\t' || c == ' ' || 0x21 <= c && c <= 0x7e || c >= 0x80 }

func isTchar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func skipOWS(v string, i int) int {
	for i < len(v) && (v[i] == ' ' || v[i] == '\t') {
		i++
	}
	return i
}

var (
	schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*$`)
	// hostRE is RFC 7230's Host: uri-host [":" port], uri-host an
	// IP-literal (an IPv6 address, checked by netip, or IPvFuture) or a
	// reg-name (which holds any IPv4address).
	hostRE = regexp.MustCompile(`^(?:\[(?:([0-9A-Fa-f:.]+)|[vV][0-9A-Fa-f]+\.[A-Za-z0-9._~!$&'()*+,;=:-]+)\]|(?:[A-Za-z0-9._~!$&'()*+,;=-]|%[0-9A-Fa-f]{2})*)(?::[0-9]*)?$`)
)

// rfcHost reports whether s is a Host by RFC 7230 §5.4 and RFC 3986.
func rfcHost(s string) bool {
	m := hostRE.FindStringSubmatch(s)
	if m == nil {
		return false
	}
	if m[1] != "" {
		a, err := netip.ParseAddr(m[1])
		return err == nil && a.Is6() && a.Zone() == ""
	}
	return true
}

// rfcParam checks the value of a parameter RFC 7239 §5 defines.
func rfcParam(name, val string) error {
	ok := true
	switch name {
	case "for", "by":
		ok = rfcNode(val)
	case "host":
		ok = rfcHost(val)
	case "proto":
		ok = schemeRE.MatchString(val)
	}
	if !ok {
		return fmt.Errorf("%s=%q is not valid", name, val)
	}
	return nil
}
