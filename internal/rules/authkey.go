package rules

import (
	"encoding/base64"
	"strings"
)

// AuthorizationKey returns the form of an Authorization (or
// Proxy-Authorization) value that a key part counts: the credential, not
// its spelling. Servers read the scheme in any case (RFC 9110, 11.1) and
// with any blanks around the credentials, and a Basic credential's base64
// leniently: Go's Request.BasicAuth takes "basic" and bits past the last
// byte ("MR==" for "MQ=="), Python's b64decode skips characters outside
// the alphabet and text after the padding. Counted as written, each
// spelling of one credential was a fresh count. So the scheme is written
// with its first letter in upper case and the rest in lower case
// ("Bearer", "Basic"), one space before the credentials, and a Basic
// credential as the base64 of what it decodes to (its alphabet's
// characters up to the first '=', the last bits dropped, a lone last
// character too, as Node drops it), unless it decodes to nothing. Other credentials (tokens) are case-sensitive and
// kept as they are. A value already in this form is returned as it is,
// without allocating, unless its scheme is Basic. A key part counts a
// Basic credential in the URL-safe alphabet under Node's reading too
// (urlSafeAuthorizationKey).
func AuthorizationKey(v string) string {
	s := trimBlanks(v)
	scheme, cred := s, ""
	if i := strings.IndexAny(s, " \t"); i >= 0 {
		scheme, cred = s[:i], trimBlanks(s[i+1:])
	}
	if strings.EqualFold(scheme, "Basic") {
		cred = basicCredential(cred, false)
	}
	if canonicalScheme(scheme) && len(s) == len(v) && (cred == "" && scheme == s || len(scheme)+1+len(cred) == len(s) && s[len(scheme)] == ' ' && s[len(scheme)+1:] == cred) {
		return v
	}
	var b strings.Builder
	b.Grow(len(scheme) + 1 + len(cred))
	for i := 0; i < len(scheme); i++ {
		c := scheme[i]
		switch {
		case i == 0 && 'a' <= c && c <= 'z':
			c -= 'a' - 'A'
		case i > 0 && 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		b.WriteByte(c)
	}
	if cred != "" {
		b.WriteByte(' ')
		b.WriteString(cred)
	}
	return b.String()
}

// authorizationHeader reports whether name (canonical) is a header whose
// values AuthorizationKey reads.
func authorizationHeader(name string) bool {
	return name == "Authorization" || name == "Proxy-Authorization"
}

// canonicalScheme reports whether scheme is written as AuthorizationKey
// writes it: its first letter upper case, its others lower case.
func canonicalScheme(scheme string) bool {
	for i := 0; i < len(scheme); i++ {
		c := scheme[i]
		if i == 0 && 'a' <= c && c <= 'z' || i > 0 && 'A' <= c && c <= 'Z' {
			return false
		}
	}
	return true
}

// urlSafeAuthorizationKey returns the key of a Basic credential v written
// in the URL-safe alphabet as Node reads it, and ok=false when v is no
// Basic credential with a '-' or '_', or Node reads it as
// AuthorizationKey does. Node's Buffer base64 decoder, which the
// basic-auth module (Express, Passport) reads credentials with, takes '-'
// for '+' and '_' for '/'; Python's b64decode skips them, as
// AuthorizationKey does. Counted under one reading only, each spelling
// the other reads as the credential was a fresh count, so a key part
// counts such a request under both.
func urlSafeAuthorizationKey(v string) (key string, ok bool) {
	if !strings.ContainsAny(v, "-_") {
		return "", false
	}
	s := trimBlanks(v)
	i := strings.IndexAny(s, " \t")
	if i < 0 || !strings.EqualFold(s[:i], "Basic") {
		return "", false
	}
	cred := trimBlanks(s[i+1:])
	if !strings.ContainsAny(cred, "-_") {
		return "", false
	}
	k := "Basic " + basicCredential(cred, true)
	return k, k != AuthorizationKey(v)
}

// basicCredential returns Basic credentials cred as the standard base64
// (padded) of the bytes they decode to, read leniently: the characters
// of the alphabet up to the first '=', the bits past the last byte
// dropped, and so a lone last character (4n+1 of them), which Node's
// decoder drops; with urlSafe, '-' read as '+' and '_' as '/'. cred is
// returned as it is when it decodes to no byte.
func basicCredential(cred string, urlSafe bool) string {
	// Sized at once, with room for the padding, so that the encoding
	// takes the place of the characters: grown as they came, and encoded
	// anew, a credential of a megabyte took seven times its size here.
	data := make([]byte, 0, len(cred)+4)
	for i := 0; i < len(cred); i++ {
		c := cred[i]
		if c == '=' {
			break
		}
		if urlSafe && c == '-' {
			c = '+'
		} else if urlSafe && c == '_' {
			c = '/'
		}
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '+' || c == '/' {
			data = append(data, c)
		}
	}
	if len(data)%4 == 1 {
		data = data[:len(data)-1] // no whole byte: Node drops it
	}
	if len(data) == 0 {
		return cred
	}
	raw := make([]byte, base64.RawStdEncoding.DecodedLen(len(data)))
	n, err := base64.RawStdEncoding.Decode(raw, data)
	if err != nil {
		return cred
	}
	if out := base64.StdEncoding.AppendEncode(data[:0], raw[:n]); string(out) != cred {
		return string(out)
	}
	return cred
}

// trimBlanks removes the spaces and tabs around s.
func trimBlanks(s string) string {
	return strings.Trim(s, " \t")
}
