package httplimit

import (
	"errors"
	"net/http"
	"strconv"
	"time"
)

// ServerWait is how long a 429 or 503 answer with header h, received at
// now, asks the client to wait: Retry-After (delay-seconds, or an HTTP date
// after now), else the largest t of the items of the RateLimit field whose
// r is 0. ok is false when h names no wait.
func ServerWait(h http.Header, now time.Time) (wait time.Duration, ok bool) {
	if v := h.Get(HeaderRetryAfter); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err == nil || errors.Is(err, strconv.ErrRange) {
			return seconds(s), true // ErrRange: s is the largest uint64
		}
		if at, err := http.ParseTime(v); err == nil {
			return max(at.Sub(now), 0), true
		}
	}
	if vs := h.Values(HeaderRateLimit); len(vs) > 0 {
		return RateLimitReset(vs...)
	}
	return 0, false
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
// limit has room again. ok is false when no item has r=0 and a valid t.
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
