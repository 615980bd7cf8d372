package httplimit

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ServerWait is how long a 429 or 503 answer with header h, received at
// now, asks the client to wait, from the first of these it carries:
//
//   - Retry-After: delay-seconds, or an HTTP date, read against the
//     answer's Date field when it has a valid one (the server's clock, as
//     the date was written by it), else against now;
//   - the RateLimit field (the IETF httpapi draft's): the largest t of its
//     items whose r is 0; or, in the draft's version 07 form, a Dictionary
//     such as "limit=100, remaining=0, reset=30", reset when remaining is
//     0;
//   - RateLimit-Reset, the draft's earlier field, whole seconds, and
//   - X-RateLimit-Reset, which may have a fraction (".250"): below 10⁹,
//     seconds; from 10⁹ on (2001 and later), a Unix time in seconds (as
//     GitHub's X-RateLimit-Reset and GitLab's RateLimit-Reset are), read
//     against Date as a date is.
//
// The two reset fields are read only when their remaining field
// (RateLimit-Remaining, X-RateLimit-Remaining) is absent or 0: a 429 that
// leaves quota on that limit is about another one. A field given more than
// once (several field lines, or their values joined with commas by a
// proxy) counts only when all its values agree; values that differ, or one
// that does not parse, make it absent. A wait is never negative; ok is
// false when h names no wait.
func ServerWait(h http.Header, now time.Time) (wait time.Duration, ok bool) {
	// The server's clock, for the absolute forms.
	base := now
	if d, ok := agreed(h, "Date", parseDate); ok {
		base = d.at()
	}
	if v, ok := agreed(h, HeaderRetryAfter, parseRetryAfter); ok {
		if v.date {
			return max(v.at().Sub(base), 0), true
		}
		return v.delta, true
	}
	if vs := h.Values(HeaderRateLimit); len(vs) > 0 {
		if wait, ok := RateLimitReset(vs...); ok {
			return wait, true
		}
		if wait, ok := draft7Reset(vs); ok {
			return wait, true
		}
	}
	for _, f := range []struct {
		remaining, reset string
		parse            func(string) (when, bool)
	}{
		{"RateLimit-Remaining", "RateLimit-Reset", parseWholeReset},
		{"X-RateLimit-Remaining", "X-RateLimit-Reset", parseReset},
	} {
		if !exhausted(h, f.remaining) {
			continue
		}
		if v, ok := agreed(h, f.reset, f.parse); ok {
			if v.date {
				return max(v.at().Sub(base), 0), true
			}
			return v.delta, true
		}
	}
	return 0, false
}

// epochFrom is the least reset field read as a Unix time: 10⁹
// seconds is 31 years, too long for a wait; 10⁹ since the epoch is 2001.
const epochFrom = 1_000_000_000

// when is a wait as a field gives it: a delay, or an instant. The instant
// is kept in seconds and nanoseconds, as time.Time holds it: nanoseconds
// since 1970 in an int64 end in 2262 (and start in 1678), and a date past
// that, such as a server's "not before 9999", must not wrap around to a
// wait of 0.
type when struct {
	delta     time.Duration
	sec, nsec int64 // the instant, if date: time.Unix(sec, nsec)
	date      bool
}

// at is w's instant.
func (w when) at() time.Time { return time.Unix(w.sec, w.nsec) }

func parseDate(s string) (when, bool) {
	at, err := http.ParseTime(s)
	if err != nil {
		return when{}, false
	}
	return when{sec: at.Unix(), nsec: int64(at.Nanosecond()), date: true}, true
}

// parseDelta reads delta-seconds: digits only, saturating.
func parseDelta(s string) (when, bool) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return when{}, false
	}
	return when{delta: seconds(n)}, true // ErrRange: n is the largest uint64
}

func parseRetryAfter(s string) (when, bool) {
	if w, ok := parseDelta(s); ok {
		return w, true
	}
	return parseDate(s)
}

// parseReset reads an X-RateLimit-Reset: digits, maybe a fraction, as
// seconds below epochFrom and as a Unix time from it on.
func parseReset(s string) (when, bool) {
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" || !digits(whole) || !digits(frac) || strings.HasSuffix(s, ".") {
		return when{}, false
	}
	n, err := strconv.ParseUint(whole, 10, 64)
	if err != nil {
		n = 1<<64 - 1 // only ErrRange is left
	}
	var nanos int64
	for i, scale := 0, int64(time.Second/10); i < len(frac) && scale > 0; i, scale = i+1, scale/10 {
		nanos += int64(frac[i]-'0') * scale
	}
	if n < epochFrom {
		return when{delta: seconds(n) + time.Duration(nanos)}, true
	}
	// Past 2^62 seconds (10^11 years) every instant is as far as any:
	// time.Unix holds it, and a wait to it is the longest Duration.
	return when{sec: int64(min(n, 1<<62)), nsec: nanos, date: true}, true
}

// parseWholeReset reads a RateLimit-Reset: as parseReset, without a
// fraction (the draft's delta-seconds are whole; a Unix time, as GitLab
// sends, is too).
func parseWholeReset(s string) (when, bool) {
	if !digits(s) {
		return when{}, false
	}
	return parseReset(s)
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// exhausted reports whether h's remaining field name leaves the limit at
// no quota: absent, or 0 (a value that is not a count says nothing).
func exhausted(h http.Header, name string) bool {
	vs := h.Values(name)
	if len(vs) == 0 {
		return true
	}
	n, ok := agreed(h, name, parseDelta)
	return !ok || n.delta == 0
}

// agreed returns the one value of the field name in h: every field line,
// and every comma-separated part of each (a proxy may join repeated lines
// into one, RFC 9110 section 5.3), must parse and give the same value.
// The comma after an HTTP date's day name ("Mon, 23 Nov…") does not
// separate parts.
func agreed(h http.Header, name string, parse func(string) (when, bool)) (v when, ok bool) {
	n := 0
	for _, line := range h.Values(name) {
		if w, good := parse(trimSpace(line)); good {
			if n > 0 && w != v {
				return when{}, false
			}
			v, n = w, n+1
			continue
		}
		parts := strings.Split(line, ",")
		for i := 0; i < len(parts); i++ {
			p := trimSpace(parts[i])
			if dayName(p) && i+1 < len(parts) {
				i++
				p += "," + parts[i]
				p = trimSpace(p)
			}
			w, good := parse(p)
			if !good || (n > 0 && w != v) {
				return when{}, false
			}
			v, n = w, n+1
		}
	}
	return v, n > 0
}

// dayName reports whether s is a day name of an HTTP date (IMF-fixdate's
// "Mon" or the obsolete RFC 850 form's "Monday"), in any case, as
// http.ParseTime reads them.
func dayName(s string) bool {
	for d := time.Sunday; d <= time.Saturday; d++ {
		if strings.EqualFold(s, d.String()) || strings.EqualFold(s, d.String()[:3]) {
			return true
		}
	}
	return false
}

// seconds converts s seconds to a Duration, saturating.
func seconds(s uint64) time.Duration {
	const most = uint64(1<<63-1) / uint64(time.Second)
	if s > most {
		return 1<<63 - 1
	}
	return time.Duration(s) * time.Second
}

// RateLimitReset reads the RateLimit field (the IETF httpapi draft's
// service limit field, an RFC 9651 List such as `"api";r=0;t=37`; several
// field lines are one list) and returns the largest t, in seconds, among
// the items whose remaining quota r is 0: how long until every exhausted
// limit has room again (t is the draft's effective window: at r=0, the
// time until the next unit is made available, which is what SetHeaders
// sends). ok is false when no item has r=0 and a valid t.
// Items it cannot parse are skipped.
func RateLimitReset(fields ...string) (wait time.Duration, ok bool) {
	for _, f := range fields {
		for len(f) > 0 {
			var r, tt int64
			var hasR, hasT bool
			f = skipSFItem(f, func(key, val string) {
				n, err := strconv.ParseInt(val, 10, 64)
				if err != nil || n < 0 {
					return
				}
				switch key {
				case "r":
					r, hasR = n, true
				case "t":
					tt, hasT = n, true
				}
			})
			if hasR && hasT && r == 0 {
				if d := seconds(uint64(tt)); !ok || d > wait {
					wait, ok = d, true
				}
			}
		}
	}
	return wait, ok
}

// draft7Reset reads the RateLimit field of the draft's version 07, an RFC
// 9651 Dictionary such as `limit=100, remaining=0, reset=30` (several
// field lines are one dictionary, a key given again replaces its value):
// reset, in seconds, when remaining is 0. Members that are not key=value
// (a later draft's list items) are skipped; a value that is not a
// non-negative integer makes its key absent.
func draft7Reset(fields []string) (wait time.Duration, ok bool) {
	remaining, reset := int64(-1), int64(-1)
	for _, f := range fields {
		for len(f) > 0 {
			end := skipValue(f, 0)
			member := f[:end]
			for end < len(f) && f[end] != ',' { // the member's parameters
				end = skipValue(f, end+1)
			}
			f = f[min(end+1, len(f)):]
			k, v, isPair := strings.Cut(member, "=")
			if !isPair {
				continue
			}
			n, err := strconv.ParseInt(trimSpace(v), 10, 64)
			if err != nil || n < 0 {
				n = -1
			}
			switch trimSpace(k) {
			case "remaining":
				remaining = n
			case "reset":
				reset = n
			}
		}
	}
	if remaining != 0 || reset < 0 {
		return 0, false
	}
	return seconds(uint64(reset)), true
}

// skipSFItem consumes one list member of s (up to a comma outside a quoted
// string), calls param for each of its parameters (";key=value"; a
// parameter without a value is skipped) and returns the rest of s after the
// comma. It is lenient: anything malformed ends up inside some member and
// is ignored rather than refused.
func skipSFItem(s string, param func(key, val string)) string {
	i := 0
	// The bare item: a string (skip its escapes) or a token.
	i = skipValue(s, i)
	for i < len(s) && s[i] != ',' {
		if s[i] != ';' {
			i = skipValue(s, i+1)
			continue
		}
		i++
		for i < len(s) && s[i] == ' ' {
			i++
		}
		k := i
		for i < len(s) && s[i] != '=' && s[i] != ';' && s[i] != ',' {
			i++
		}
		key := s[k:i]
		if i < len(s) && s[i] == '=' {
			v := i + 1
			i = skipValue(s, v)
			param(key, trimSpace(s[v:i]))
		}
	}
	if i < len(s) {
		i++ // the comma
	}
	return s[i:]
}

// skipValue returns the index of the first ';' or ',' at or after i that is
// not inside a quoted string.
func skipValue(s string, i int) int {
	for i < len(s) {
		switch s[i] {
		case ';', ',':
			return i
		case '"':
			i++
			for i < len(s) && s[i] != '"' {
				if s[i] == '\\' {
					i++
				}
				i++
			}
		}
		i++
	}
	return len(s)
}

func trimSpace(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}
