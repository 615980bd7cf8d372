package httplimit

import (
	"fmt"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func TestHeaderKeysAreCanonical(t *testing.T) {
	for _, pair := range [][2]string{
		{HeaderLimit, keyLimit}, {HeaderRemaining, keyRemaining}, {HeaderReset, keyReset},
		{HeaderPolicy, keyPolicy}, {HeaderRateLimit, keyRateLimit}, {HeaderRetryAfter, keyRetryAfter},
	} {
		if got := textproto.CanonicalMIMEHeaderKey(pair[0]); got != pair[1] {
			t.Errorf("CanonicalMIMEHeaderKey(%q) = %q, want the key constant %q", pair[0], got, pair[1])
		}
	}
	h := http.Header{}
	h.Set(HeaderLimit, "1")
	if _, ok := h[keyLimit]; !ok {
		t.Errorf("http.Header.Set(%q) keyed %v, want %q", HeaderLimit, h, keyLimit)
	}
}

// TestRemainingNeverExceedsLimit: a 10/s token bucket with burst 20 (and a
// leaky bucket, which admits Burst+1 at once) reports Remaining ≤ Limit.
func TestRemainingNeverExceedsLimit(t *testing.T) {
	for _, c := range []struct {
		alg  sluice.Algorithm
		lim  sluice.Limit
		full int64 // d.Remaining of the first request
	}{
		{sluice.TokenBucket, sluice.PerSecond(10).WithBurst(20), 19},
		{sluice.GCRA, sluice.PerSecond(10).WithBurst(20), 19},
		{sluice.LeakyBucket, sluice.PerSecond(10), 10},
	} {
		var st sluice.State
		d, _, err := c.alg.Take(&st, c.lim, time.Unix(1_700_000_000, 0), 1)
		if err != nil || d.Remaining != c.full {
			t.Fatalf("%v %v: first decision %+v, %v; want Remaining %d", c.alg, c.lim, d, err, c.full)
		}
		h := http.Header{}
		SetHeaders(h, d, "p", c.alg, c.lim)
		if h.Get(HeaderLimit) != "10" || h.Get(HeaderRemaining) != "10" {
			t.Errorf("%v %v: Limit %s, Remaining %s; want 10 and 10", c.alg, c.lim, h.Get(HeaderLimit), h.Get(HeaderRemaining))
		}
		if got, want := h.Get(HeaderRateLimit), `"p";r=10;t=1`; got != want {
			t.Errorf("%v %v: RateLimit %q, want %q", c.alg, c.lim, got, want)
		}
	}
}

// TestStructuredFields: RateLimit-Policy and RateLimit are RFC 9651 Lists
// of one Item, a String naming the policy with the draft's Integer
// parameters (q and w; r and t), whatever the name and the figures:
// an sf-integer has at most 15 digits, so a quota or a remaining beyond
// that is sent as the largest one, 999,999,999,999,999 (a client must
// ignore a malformed field, and a lower figure is the safe side).
func TestStructuredFields(t *testing.T) {
	huge := sluice.Limit{Rate: 2_000_000_000_000_000, Period: time.Microsecond}
	if err := huge.Validate(); err != nil {
		t.Fatalf("a limit of %v: %v", huge, err)
	}
	for _, tc := range []struct {
		name   string
		d      sluice.Decision
		policy string
		lim    sluice.Limit
		q, r   int64
	}{
		{"plain", sluice.Decision{Allowed: true, Remaining: 4, ResetAfter: 1500 * time.Millisecond}, "api", sluice.PerMinute(5), 5, 4},
		{"quotes and backslashes", sluice.Decision{Allowed: true, Remaining: 1}, `a"b\c`, sluice.PerSecond(2), 2, 1},
		{"not printable ASCII", sluice.Decision{Allowed: true, Remaining: 1}, "é\x00\x7f\t", sluice.PerSecond(2), 2, 1},
		{"empty", sluice.Decision{Allowed: true}, "", sluice.PerSecond(2), 2, 0},
		{"denied for ever", sluice.Decision{RetryAfter: -1, ResetAfter: 1<<63 - 1}, "x", sluice.PerHour(1), 1, 0},
		{"beyond an sf-integer", sluice.Decision{Allowed: true, Remaining: huge.Rate}, "huge", huge, 999_999_999_999_999, 999_999_999_999_999},
	} {
		h := http.Header{}
		SetHeaders(h, tc.d, tc.policy, 0, tc.lim)
		for _, f := range []struct {
			field string
			keys  []string
		}{{HeaderPolicy, []string{"q", "w"}}, {HeaderRateLimit, []string{"r", "t"}}} {
			v := h.Get(f.field)
			params, err := parseSFItem(v)
			if err != nil {
				t.Errorf("%s: %s: %q is not an sf-string Item with Integer parameters: %v", tc.name, f.field, v, err)
				continue
			}
			for _, k := range f.keys {
				if _, ok := params[k]; !ok {
					t.Errorf("%s: %s: %q has no parameter %s", tc.name, f.field, v, k)
				}
			}
			if q, ok := params["q"]; ok && q != tc.q {
				t.Errorf("%s: %s: q=%d, want %d", tc.name, f.field, q, tc.q)
			}
			if r, ok := params["r"]; ok && r != tc.r {
				t.Errorf("%s: %s: r=%d, want %d", tc.name, f.field, r, tc.r)
			}
			if w, ok := params["w"]; ok && w < 1 {
				t.Errorf("%s: %s: w=%d, want at least 1 (the draft: non-zero)", tc.name, f.field, w)
			}
		}
	}
}

// parseSFItem parses an RFC 9651 List of one Item whose bare item is a
// String and whose parameters are Integers, returning the parameters.
func parseSFItem(s string) (map[string]int64, error) {
	i := 0
	if i >= len(s) || s[i] != '"' {
		return nil, fmt.Errorf("no String at %d", i)
	}
	for i++; ; i++ {
		if i >= len(s) {
			return nil, fmt.Errorf("unterminated String")
		}
		c := s[i]
		if c == '\\' {
			i++
			if i >= len(s) || s[i] != '"' && s[i] != '\\' {
				return nil, fmt.Errorf("bad escape at %d", i)
			}
			continue
		}
		if c == '"' {
			i++
			break
		}
		if c < 0x20 || c > 0x7e {
			return nil, fmt.Errorf("byte %#x in a String", c)
		}
	}
	params := map[string]int64{}
	for i < len(s) {
		if s[i] != ';' {
			return nil, fmt.Errorf("want ';' at %d", i)
		}
		i++
		start := i
		for i < len(s) && (s[i] >= 'a' && s[i] <= 'z' || s[i] >= '0' && s[i] <= '9' || s[i] == '_' || s[i] == '-' || s[i] == '.' || s[i] == '*') {
			i++
		}
		key := s[start:i]
		if key == "" || key[0] < 'a' || key[0] > 'z' {
			return nil, fmt.Errorf("bad key %q", key)
		}
		if _, dup := params[key]; dup {
			return nil, fmt.Errorf("parameter %s twice", key)
		}
		if i >= len(s) || s[i] != '=' {
			return nil, fmt.Errorf("parameter %s without an Integer", key)
		}
		i++
		start = i
		if i < len(s) && s[i] == '-' {
			i++
		}
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		digits := strings.TrimPrefix(s[start:i], "-")
		if digits == "" || len(digits) > 15 {
			return nil, fmt.Errorf("parameter %s: %q is not an sf-integer (1 to 15 digits)", key, s[start:i])
		}
		n, err := strconv.ParseInt(s[start:i], 10, 64)
		if err != nil {
			return nil, err
		}
		params[key] = n
	}
	return params, nil
}

// A request whose cost a fresh key's limit can never admit is refused
// with a wait of at least 1 in both units: Retry-After 1 and
// retry_after_ms 1, never 0 (an immediate retry, refused again).
func TestRetryAfterNeverZero(t *testing.T) {
	for _, alg := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA, sluice.LeakyBucket, sluice.FixedWindow, sluice.SlidingWindowLog, sluice.SlidingWindowCounter} {
		var st sluice.State
		d, _, err := alg.Take(&st, sluice.PerMinute(2), time.Unix(1_700_000_010, 0), 5)
		if err != nil || d.Allowed {
			t.Fatalf("%v: cost 5 under 2/m: %+v, %v; want a refusal", alg, d, err)
		}
		if s, ms := RetryAfterSeconds(d), RetryAfterMillis(d); s < 1 || ms < 1 || ms > s*1000 {
			t.Errorf("%v: cost 5 under 2/m (%+v): Retry-After %d s, retry_after_ms %d; want both at least 1, the milliseconds within the seconds", alg, d, s, ms)
		}
	}
}

// TestRateLimitTIsTheNextUnit: the RateLimit field's t is the draft's
// effective window, the seconds until Remaining grows (the next unit made
// available), not until the limit is full again (X-RateLimit-Reset). A
// 10/m limit after three requests 1 s apart: the buckets and GCRA have
// their next token 4 s later (the first one's, 6 s after it), full again
// only 16 s later; the fixed window (at the start of a minute) has both at its end;
// the sliding windows, whose decision does not carry when the oldest unit
// leaves, keep the time until full.
func TestRateLimitTIsTheNextUnit(t *testing.T) {
	start := time.Unix(1_700_000_040, 0) // the start of a minute
	for _, c := range []struct {
		alg        sluice.Algorithm
		reset, rlt string
	}{
		{sluice.TokenBucket, "16", `"p";r=7;t=4`},
		{sluice.GCRA, "16", `"p";r=7;t=4`},
		{sluice.LeakyBucket, "16", `"p";r=7;t=4`},
		{sluice.FixedWindow, "58", `"p";r=7;t=58`},
		{sluice.SlidingWindowLog, "60", `"p";r=7;t=60`},
	} {
		lim := sluice.PerMinute(10)
		if c.alg == sluice.LeakyBucket {
			lim = lim.WithBurst(9) // 10 at once, as the others
		}
		var st sluice.State
		var d sluice.Decision
		for i := range 3 {
			var err error
			if d, _, err = c.alg.Take(&st, lim, start.Add(time.Duration(i)*time.Second), 1); err != nil || !d.Allowed {
				t.Fatalf("%v: request %d: %+v, %v", c.alg, i, d, err)
			}
		}
		h := http.Header{}
		SetHeaders(h, d, "p", c.alg, lim)
		if got := h.Get(HeaderReset); got != c.reset {
			t.Errorf("%v: X-RateLimit-Reset %s, want %s (until full)", c.alg, got, c.reset)
		}
		if got := h.Get(HeaderRateLimit); got != c.rlt {
			t.Errorf("%v: RateLimit %q, want %q", c.alg, got, c.rlt)
		}
	}
}
