package httplimit

import (
	"net/http"
	"strconv"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/jsonstr"
)

// Header names written by SetHeaders and WriteLimited.
const (
	HeaderLimit      = "X-RateLimit-Limit"
	HeaderRemaining  = "X-RateLimit-Remaining"
	HeaderReset      = "X-RateLimit-Reset"
	HeaderPolicy     = "RateLimit-Policy"
	HeaderRateLimit  = "RateLimit"
	HeaderRetryAfter = "Retry-After"
	// HeaderXRetryAfter repeats Retry-After on limited answers, completing
	// the X-RateLimit-* set (Limit, Remaining, Retry-After) of the
	// convention many clients read.
	HeaderXRetryAfter = "X-RateLimit-Retry-After"
)

// The same names in canonical form (textproto.CanonicalMIMEHeaderKey), as
// http.Header keys them; assigning these directly skips canonicalizing per
// request.
const (
	keyLimit       = "X-Ratelimit-Limit"
	keyRemaining   = "X-Ratelimit-Remaining"
	keyReset       = "X-Ratelimit-Reset"
	keyPolicy      = "Ratelimit-Policy"
	keyRateLimit   = "Ratelimit"
	keyRetryAfter  = "Retry-After"
	keyXRetryAfter = "X-Ratelimit-Retry-After"
)

// SetHeaders sets the rate-limit response headers of d, decided by alg
// under limit by the policy (rule) named policy, on h, replacing any
// earlier values:
//
//	X-RateLimit-Limit:     limit.Rate
//	X-RateLimit-Remaining: d.Remaining, at most limit.Rate
//	X-RateLimit-Reset:     seconds until the limit is full again (d.ResetAfter, rounded up)
//	RateLimit-Policy:      "policy";q=<Rate>;w=<Period in seconds, rounded up, at least 1>
//	RateLimit:             "policy";r=<Remaining>;t=<seconds until Remaining grows>
//
// The last two are the structured fields (RFC 9651 Lists) of the IETF
// HTTPAPI working group's "RateLimit header fields for HTTP",
// draft-ietf-httpapi-ratelimit-headers-11 (May 2026), sections 3 and 4: the
// policy item is a String naming the policy, with q (quota) and w (window,
// whole seconds); the service limit item names the same policy, with r (the
// available quota) and t (the effective window, whole seconds: the time
// within which the client can use no more than r). t is
// alg.NextAfter(d, limit), rounded up: the time until the next unit is
// made available, after which the client could use more than r. It is
// exact (to the second, rounded up) for token_bucket, gcra, leaky_bucket
// and fixed_window; for sliding_window_log and sliding_window_counter,
// whose decision does not carry when the oldest counted unit leaves, it is
// the time until the limit is full again, longer than the draft's (a
// client following it is slower than it need be, never refused), except on
// a refusal for want of one unit, where it is exact for them too. On a
// limit that is full, t is the time a unit spent now takes to come back
// (Period/Rate for the buckets, about Period for the windows): the client
// can use r at once, and no more until then. On a denied decision t is
// never past d.RetryAfter, so that Retry-After never points before the end
// of the effective window (draft section 6). An invalid alg (0), for a
// decision that is not one alg made under limit (a sharded key's estimate),
// sends the time until full (bounded by a denial's RetryAfter) as t.
//
// With a burst larger than the rate (or a leaky bucket, which admits
// Burst+1 at once), the limit can admit more at an instant than Rate: the
// headers still say Limit = Rate, the limit per period, and report
// Remaining capped at Rate, so that Remaining never exceeds Limit (nor r
// exceeds q). A client reading them never over-spends; d.Remaining keeps
// the full figure for callers that want it.
//
// The policy name is sent as an sf-string: characters outside printable
// ASCII are replaced by '_', and '"' and '\' are escaped. q and r are at
// most 999,999,999,999,999, the largest sf-integer.
func SetHeaders(h http.Header, d sluice.Decision, policy string, alg sluice.Algorithm, limit sluice.Limit) {
	// The five values are built in the text of one headerValues and
	// become substrings of it: one allocation per response, not ten (the
	// proxy and forward-auth set these on every response a rule applied
	// to).
	hv := new(headerValues)
	remaining := min(max(d.Remaining, 0), limit.Rate)
	reset := ceilSeconds(d.ResetAfter)
	t := ceilSeconds(alg.NextAfter(d, limit))
	var end [5]int
	b := strconv.AppendInt(hv.text[:0], limit.Rate, 10)
	end[0] = len(b)
	b = strconv.AppendInt(b, remaining, 10)
	end[1] = len(b)
	b = strconv.AppendInt(b, reset, 10)
	end[2] = len(b)
	b = appendSFString(b, policy)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, min(limit.Rate, maxSFInteger), 10)
	b = append(b, ";w="...)
	b = strconv.AppendInt(b, max(ceilSeconds(limit.Period), 1), 10)
	end[3] = len(b)
	b = appendSFString(b, policy)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, min(remaining, maxSFInteger), 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, t, 10)
	end[4] = len(b)
	// b (hv.text, or where a long policy name moved it) is not written
	// again: a string of it is immutable, as string(b) would be.
	all := unsafe.String(unsafe.SliceData(b), len(b))
	vals := hv.vals[:]
	from := 0
	for i, e := range end {
		vals[i] = all[from:e]
		from = e
	}
	h[keyLimit] = vals[0:1:1]
	h[keyRemaining] = vals[1:2:2]
	h[keyReset] = vals[2:3:3]
	h[keyPolicy] = vals[3:4:4]
	h[keyRateLimit] = vals[4:5:5]
}

// tighterSet reports whether h already carries the rate-limit headers of
// a limit tighter than d, decided under limit, by the rule Middleware
// uses to choose among its own: a lower X-RateLimit-Remaining, or the same
// and a longer X-RateLimit-Reset. They were set by a middleware around
// this one (a global limit around a route's), and an admitted request
// keeps them, as one middleware with both rules would send them.
func tighterSet(h http.Header, d *sluice.Decision, limit sluice.Limit) bool {
	vs := h[keyRemaining]
	if len(vs) != 1 {
		return false
	}
	theirs, err := strconv.ParseInt(vs[0], 10, 64)
	if err != nil {
		return false
	}
	if ours := min(max(d.Remaining, 0), limit.Rate); theirs != ours {
		return theirs < ours
	}
	vs = h[keyReset]
	if len(vs) != 1 {
		return false
	}
	reset, err := strconv.ParseInt(vs[0], 10, 64)
	return err == nil && reset > ceilSeconds(d.ResetAfter)
}

// maxSFInteger is the largest RFC 9651 Integer (15 digits). A limit's rate
// can exceed it (up to 2^53 per microsecond): q and r are then sent as it,
// a lower figure than the real one, where a longer number would make the
// field malformed (and clients ignore a malformed field).
const maxSFInteger = 999_999_999_999_999

// headerValues is the one allocation of SetHeaders: the five values and
// the text they are cut from (96 bytes hold them for rule names of up
// to about 20 bytes and limits of up to a billion; a longer text moves
// to its own array).
type headerValues struct {
	vals [5]string
	text [96]byte
}

// RetryAfterSeconds is d's Retry-After in whole seconds, rounded up: at
// least 1 for a denied decision (0 would invite an immediate retry), 0 for
// an allowed one. A request that can never be admitted (sluice.Never)
// reports the time until the limit is full again.
func RetryAfterSeconds(d sluice.Decision) int64 {
	if d.Allowed {
		return 0
	}
	return max(ceilSeconds(retryWait(d)), 1)
}

// RetryAfterMillis is d's retry_after_ms: RetryAfter in milliseconds,
// rounded up; for sluice.Never, the time until the limit is full again. It
// is at least 1 for a denied decision (as RetryAfterSeconds: 0 would
// invite an immediate retry), 0 for an allowed one.
func RetryAfterMillis(d sluice.Decision) int64 {
	if d.Allowed {
		return 0
	}
	return max(ceilDiv(retryWait(d), time.Millisecond), 1)
}

// retryWait is how long a denied client is told to wait: RetryAfter, or,
// for a request that can never be admitted (sluice.Never), the time until
// the limit is full again.
func retryWait(d sluice.Decision) time.Duration {
	if d.RetryAfter < 0 {
		return d.ResetAfter
	}
	return d.RetryAfter
}

// WriteLimited answers 429 Too Many Requests for a request denied by the
// rule named rule: Retry-After (whole seconds, rounded up), the same value
// in X-RateLimit-Retry-After, and the JSON body
// {"error":"rate_limited","rule":NAME,"retry_after_ms":N}. Set the
// rate-limit headers (SetHeaders) first if the answer should carry them.
func WriteLimited(w http.ResponseWriter, rule string, d sluice.Decision) {
	WriteLimitedStatus(w, http.StatusTooManyRequests, rule, d)
}

// WriteLimitedStatus is WriteLimited with another status, such as 403 for
// nginx's auth_request, which passes on only 401 and 403.
func WriteLimitedStatus(w http.ResponseWriter, status int, rule string, d sluice.Decision) {
	var buf [160]byte
	b := append(buf[:0], `{"error":"rate_limited","rule":`...)
	b = jsonstr.Append(b, rule)
	b = append(b, `,"retry_after_ms":`...)
	b = strconv.AppendInt(b, RetryAfterMillis(d), 10)
	b = append(b, "}\n"...)
	h := w.Header()
	ra := strconv.FormatInt(RetryAfterSeconds(d), 10)
	h[keyRetryAfter] = []string{ra}
	h[keyXRetryAfter] = []string{ra}
	h["Content-Type"] = []string{"application/json"}
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	w.WriteHeader(status)
	w.Write(b)
}

// ceilSeconds is d in whole seconds, rounded up; negative d gives 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return ceilDiv(d, time.Second)
}

// ceilDiv is d/unit rounded up; 0 for d ≤ 0. It does not overflow: the
// longest Duration rounds up as any other.
func ceilDiv(d, unit time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	q := int64(d / unit)
	if d%unit != 0 {
		q++
	}
	return q
}

// appendSFString appends s as an RFC 9651 sf-string: "…" with '"' and '\'
// escaped; bytes outside printable ASCII (0x20–0x7E), which an sf-string
// cannot hold, become '_'.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '_')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
