package httplimit_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
)

func TestServerWait(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		header map[string]string
		want   time.Duration
		ok     bool
	}{
		{map[string]string{"Retry-After": "120"}, 2 * time.Minute, true},
		{map[string]string{"Retry-After": "0"}, 0, true},
		{map[string]string{"Retry-After": "Mon, 23 Nov 2026 12:00:30 GMT"}, 30 * time.Second, true},
		{map[string]string{"Retry-After": "Mon, 23 Nov 2026 11:00:00 GMT"}, 0, true},
		// The obsolete date forms RFC 9110 still asks recipients to read.
		{map[string]string{"Retry-After": "Monday, 23-Nov-26 12:00:30 GMT"}, 30 * time.Second, true},
		{map[string]string{"Retry-After": "Mon Nov 23 12:00:30 2026"}, 30 * time.Second, true},
		{map[string]string{"Retry-After": "1.5"}, 0, false},
		{map[string]string{"Retry-After": "+5"}, 0, false},
		{map[string]string{"Retry-After": "-5"}, 0, false},
		{map[string]string{"Retry-After": "soon"}, 0, false},
		{map[string]string{"Retry-After": "99999999999999999999"}, 1<<63 - 1, true},
		{map[string]string{"Retry-After": "junk", "RateLimit": `"x";r=0;t=4`}, 4 * time.Second, true},
		{map[string]string{"RateLimit": `"x";r=1;t=4`}, 0, false},
		{map[string]string{"RateLimit": `"x";t=4`}, 0, false},
		{map[string]string{"RateLimit": `"x";r=0;t=-4`}, 0, false},
		{map[string]string{"RateLimit": `"x" ; r=0 ; t=4`}, 4 * time.Second, true},
		{map[string]string{"RateLimit": `garbage;;=,,;r=0;t=3`}, 3 * time.Second, true},
		// An HTTP date is read against the answer's Date (the server's
		// clock, here a minute behind ours), not against now.
		{map[string]string{"Retry-After": "Mon, 23 Nov 2026 12:00:30 GMT", "Date": "Mon, 23 Nov 2026 11:59:00 GMT"}, 90 * time.Second, true},
		{map[string]string{"Retry-After": "Mon, 23 Nov 2026 12:00:30 GMT", "Date": "Mon, 23 Nov 2026 12:01:00 GMT"}, 0, true},
		{map[string]string{"Retry-After": "Mon, 23 Nov 2026 12:00:30 GMT", "Date": "yesterday"}, 30 * time.Second, true},
		{map[string]string{"Retry-After": "Mon, 23 Nov 2026 12:00:30 GMT", "Date": "Mon, 23 Nov 2026 11:59:00 GMT, Mon, 23 Nov 2026 11:59:00 GMT"}, 90 * time.Second, true},
		{map[string]string{"Retry-After": "30", "Date": "Mon, 23 Nov 2026 11:00:00 GMT"}, 30 * time.Second, true},
		// Two equal field lines joined into one (by a proxy) are that
		// value; parts that differ, or garbage among them, are no value.
		{map[string]string{"Retry-After": "120, 120"}, 2 * time.Minute, true},
		{map[string]string{"Retry-After": "120,120,120"}, 2 * time.Minute, true},
		{map[string]string{"Retry-After": "120, 60"}, 0, false},
		{map[string]string{"Retry-After": "120, soon"}, 0, false},
		{map[string]string{"Retry-After": "120, 60", "RateLimit": `"x";r=0;t=4`}, 4 * time.Second, true},
		{map[string]string{"Retry-After": "Mon, 23 Nov 2026 12:00:30 GMT, Mon, 23 Nov 2026 12:00:30 GMT"}, 30 * time.Second, true},
		{map[string]string{"Retry-After": "Monday, 23-Nov-26 12:00:30 GMT, Mon, 23 Nov 2026 12:00:30 GMT"}, 30 * time.Second, true},
		{map[string]string{"Retry-After": "Mon, 23 Nov 2026 12:00:30 GMT, Mon, 23 Nov 2026 12:00:40 GMT"}, 0, false},
		{map[string]string{"Retry-After": "30, Mon, 23 Nov 2026 12:00:30 GMT"}, 0, false},
		// The draft's earlier RateLimit-Reset (seconds), when its
		// RateLimit-Remaining is absent or 0.
		{map[string]string{"RateLimit-Reset": "30"}, 30 * time.Second, true},
		{map[string]string{"RateLimit-Reset": "30", "RateLimit-Remaining": "0"}, 30 * time.Second, true},
		{map[string]string{"RateLimit-Reset": "30", "RateLimit-Remaining": "2"}, 0, false},
		{map[string]string{"RateLimit-Reset": "30, 30"}, 30 * time.Second, true},
		{map[string]string{"RateLimit-Reset": "30, 31"}, 0, false},
		{map[string]string{"RateLimit-Reset": "1.5"}, 0, false},
		{map[string]string{"RateLimit-Reset": "30", "RateLimit": `"x";r=0;t=4`}, 4 * time.Second, true},
		{map[string]string{"RateLimit-Reset": "30", "Retry-After": "5"}, 5 * time.Second, true},
		// From 10^9 on a Unix time, as X-RateLimit-Reset (GitLab sends
		// RateLimit-Reset so, on a 429 without Retry-After), read
		// against Date when there is one; still no fraction.
		{map[string]string{"RateLimit-Reset": strconv.FormatInt(now.Unix()+45, 10)}, 45 * time.Second, true},
		{map[string]string{"RateLimit-Reset": strconv.FormatInt(now.Unix()+45, 10), "RateLimit-Remaining": "0", "Date": "Mon, 23 Nov 2026 11:59:00 GMT"}, 105 * time.Second, true},
		{map[string]string{"RateLimit-Reset": strconv.FormatInt(now.Unix()-45, 10)}, 0, true},
		{map[string]string{"RateLimit-Reset": "999999999"}, 999999999 * time.Second, true},
		{map[string]string{"RateLimit-Reset": strconv.FormatInt(now.Unix()+45, 10) + ".5"}, 0, false},
		// X-RateLimit-Reset: seconds below 10^9, a Unix time from 10^9
		// (read against Date when there is one), with a fraction or not.
		{map[string]string{"X-RateLimit-Reset": "30"}, 30 * time.Second, true},
		{map[string]string{"X-RateLimit-Reset": "30", "X-RateLimit-Remaining": "0"}, 30 * time.Second, true},
		{map[string]string{"X-RateLimit-Reset": "30", "X-RateLimit-Remaining": "1"}, 0, false},
		{map[string]string{"X-RateLimit-Reset": "2.25"}, 2250 * time.Millisecond, true},
		{map[string]string{"X-RateLimit-Reset": "999999999"}, 999999999 * time.Second, true},
		{map[string]string{"X-RateLimit-Reset": strconv.FormatInt(now.Unix()+45, 10)}, 45 * time.Second, true},
		{map[string]string{"X-RateLimit-Reset": strconv.FormatInt(now.Unix()+45, 10) + ".5"}, 45500 * time.Millisecond, true},
		{map[string]string{"X-RateLimit-Reset": strconv.FormatInt(now.Unix()-45, 10)}, 0, true},
		{map[string]string{"X-RateLimit-Reset": strconv.FormatInt(now.Unix()+45, 10), "Date": "Mon, 23 Nov 2026 11:59:00 GMT"}, 105 * time.Second, true},
		{map[string]string{"X-RateLimit-Reset": "30, 30"}, 30 * time.Second, true},
		{map[string]string{"X-RateLimit-Reset": "30, 40"}, 0, false},
		{map[string]string{"X-RateLimit-Reset": "-30"}, 0, false},
		{map[string]string{"X-RateLimit-Reset": "1e3"}, 0, false},
		{map[string]string{"X-RateLimit-Reset": "30.", "RateLimit-Reset": "7"}, 7 * time.Second, true},
		{map[string]string{"X-RateLimit-Reset": "30", "RateLimit-Reset": "7"}, 7 * time.Second, true},
		{map[string]string{"X-RateLimit-Reset": "30", "RateLimit-Reset": "7", "RateLimit-Remaining": "3"}, 30 * time.Second, true},
		{nil, 0, false},
	}
	for _, tc := range tests {
		h := http.Header{}
		for k, v := range tc.header {
			h.Set(k, v)
		}
		got, ok := httplimit.ServerWait(h, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ServerWait(%v) = %v, %v; want %v, %v", tc.header, got, ok, tc.want, tc.ok)
		}
	}
	// Several field lines are one list.
	h := http.Header{"Ratelimit": {`"a";r=0;t=2`, `"b";r=0;t=6`}}
	if got, ok := httplimit.ServerWait(h, now); got != 6*time.Second || !ok {
		t.Errorf("two RateLimit lines: got %v, %v; want 6s, true", got, ok)
	}
	// Two Retry-After lines count as one value when they agree, and as
	// none when they do not.
	h = http.Header{"Retry-After": {"120", "120"}}
	if got, ok := httplimit.ServerWait(h, now); got != 2*time.Minute || !ok {
		t.Errorf("two Retry-After lines 120: got %v, %v; want 2m, true", got, ok)
	}
	h = http.Header{"Retry-After": {"120", "60"}, "Ratelimit": {`"a";r=0;t=2`}}
	if got, ok := httplimit.ServerWait(h, now); got != 2*time.Second || !ok {
		t.Errorf("Retry-After lines 120 and 60: got %v, %v; want the RateLimit field's 2s, true", got, ok)
	}
}

// The RateLimit field SetHeaders writes reads back: for a denied decision
// (r=0) of no known algorithm its t is the rounded-up RetryAfter (never
// past the time until full, ResetAfter), whatever the policy's name.
func FuzzRateLimitReset(f *testing.F) {
	f.Add("api", int64(0), int64(1500))
	f.Add(`a"b\c,d;e=f`, int64(0), int64(37000))
	f.Add("per-ip", int64(3), int64(0))
	f.Fuzz(func(t *testing.T, policy string, remaining, retryMs int64) {
		if remaining < 0 || retryMs < 0 || retryMs > 1<<40 {
			return
		}
		retry := time.Duration(retryMs) * time.Millisecond
		d := sluice.Decision{Allowed: remaining > 0, Remaining: remaining,
			RetryAfter: retry, ResetAfter: max(time.Minute, retry)}
		if d.Allowed {
			d.RetryAfter = 0
		}
		h := http.Header{}
		httplimit.SetHeaders(h, d, policy, 0, sluice.PerMinute(10))
		got, ok := httplimit.RateLimitReset(h.Values("RateLimit")...)
		if !d.Allowed {
			want := time.Duration(httplimit.RetryAfterSeconds(d)) * time.Second
			if retryMs == 0 {
				want = 0
			}
			if !ok || got != want {
				t.Errorf("RateLimit %q: got %v, %v; want %v, true", h.Get("RateLimit"), got, ok, want)
			}
		} else if ok {
			t.Errorf("RateLimit %q (r=%d): got a wait %v", h.Get("RateLimit"), remaining, got)
		}
		// Arbitrary input never panics and never gives a negative wait.
		if w, _ := httplimit.RateLimitReset(policy); w < 0 {
			t.Errorf("RateLimitReset(%q) = %v", policy, w)
		}
	})
}

// Whatever the fields hold, ServerWait never panics and never gives a
// negative wait, or a wait with ok false; a value given twice (joined as a
// proxy joins field lines) reads as the value given once.
func FuzzServerWait(f *testing.F) {
	f.Add("120", "", "", "")
	f.Add("Mon, 23 Nov 2026 12:00:30 GMT", "Mon, 23 Nov 2026 11:59:00 GMT", "", "")
	f.Add("", "", "30", "1795435245.5")
	f.Add("", "Mon, 23 Nov 2026 11:59:00 GMT", "1795435245", "")
	f.Add("Mon,", "Sun, ,", "1,", "1.")
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, retryAfter, date, reset, xReset string) {
		h := http.Header{}
		for k, v := range map[string]string{"Retry-After": retryAfter, "Date": date, "RateLimit-Reset": reset, "X-RateLimit-Reset": xReset} {
			if v != "" {
				h.Set(k, v)
			}
		}
		wait, ok := httplimit.ServerWait(h, now)
		if wait < 0 || (!ok && wait != 0) {
			t.Fatalf("ServerWait(%v) = %v, %v", h, wait, ok)
		}
		twice := http.Header{}
		for k, vs := range h {
			twice.Set(k, vs[0]+", "+vs[0])
		}
		if w2, ok2 := httplimit.ServerWait(twice, now); ok && (w2 != wait || !ok2) {
			t.Errorf("ServerWait(%v) = %v, %v; once: %v, true", twice, w2, ok2, wait)
		}
	})
}

// Dates past 2262 or before 1678, which time.Time holds but nanoseconds
// since 1970 in an int64 do not, are read as the instants they name: a
// server that says "not before the year 9999" is waited for (the
// transport gives up, the wait being past MaxElapsed), not retried at
// once; one whose Date is later than its Retry-After is retried at once.
func TestServerWaitFarDates(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	y2300 := time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)
	const most = time.Duration(1<<63 - 1)
	tests := []struct {
		header map[string]string
		want   time.Duration
	}{
		{map[string]string{"Retry-After": "Fri, 31 Dec 9999 23:59:59 GMT"}, most},
		{map[string]string{"Retry-After": "Sat, 01 Jan 2300 00:00:00 GMT"}, y2300.Sub(now)},
		{map[string]string{"Retry-After": "Mon, 23 Nov 2026 12:00:30 GMT", "Date": "Sat, 01 Jan 1600 00:00:00 GMT"}, most},
		{map[string]string{"Retry-After": "Mon, 23 Nov 2026 12:00:30 GMT", "Date": "Fri, 31 Dec 9999 23:59:59 GMT"}, 0},
		{map[string]string{"Retry-After": "Mon, 23 Nov 2026 12:00:30 GMT", "Date": "Sat, 01 Jan 2300 00:00:00 GMT"}, 0},
		{map[string]string{"Retry-After": "Sat, 01 Jan 2300 00:00:30 GMT", "Date": "Sat, 01 Jan 2300 00:00:00 GMT"}, 30 * time.Second},
		{map[string]string{"X-RateLimit-Reset": "9999999999"}, time.Unix(9999999999, 0).Sub(now)},
		{map[string]string{"X-RateLimit-Reset": "1795435245", "Date": "Fri, 31 Dec 9999 23:59:59 GMT"}, 0},
		{map[string]string{"X-RateLimit-Reset": "99999999999999999999", "Date": "Fri, 31 Dec 9999 23:59:59 GMT"}, most},
		{map[string]string{"X-RateLimit-Reset": "10413792030.5", "Date": "Sat, 01 Jan 2300 00:00:00 GMT"}, 30500 * time.Millisecond},
	}
	for _, tc := range tests {
		h := http.Header{}
		for k, v := range tc.header {
			h.Set(k, v)
		}
		if got, ok := httplimit.ServerWait(h, now); got != tc.want || !ok {
			t.Errorf("ServerWait(%v) = %v, %v; want %v, true", tc.header, got, ok, tc.want)
		}
	}
}

// The RateLimit field of the draft's version 07 (2023), an RFC 9651
// Dictionary such as `limit=100, remaining=0, reset=30`, which many
// servers still send: reset is the wait when remaining is 0.
func TestServerWaitDraft7(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		header map[string]string
		want   time.Duration
		ok     bool
	}{
		{map[string]string{"RateLimit": "limit=100, remaining=0, reset=30"}, 30 * time.Second, true},
		{map[string]string{"RateLimit": "limit=100,remaining=0,reset=30"}, 30 * time.Second, true},
		{map[string]string{"RateLimit": "reset=30, remaining=0"}, 30 * time.Second, true},
		{map[string]string{"RateLimit": "limit=100, remaining=0, reset=0"}, 0, true},
		{map[string]string{"RateLimit": "limit=100, remaining=5, reset=30"}, 0, false},
		{map[string]string{"RateLimit": "limit=100, reset=30"}, 0, false},
		{map[string]string{"RateLimit": "limit=100, remaining=0"}, 0, false},
		{map[string]string{"RateLimit": "limit=100, remaining=0, reset=-3"}, 0, false},
		{map[string]string{"RateLimit": "limit=100, remaining=0, reset=1.5"}, 0, false},
		{map[string]string{"RateLimit": "limit=100, remaining=0, reset=30", "Retry-After": "7"}, 7 * time.Second, true},
		{map[string]string{"RateLimit": "limit=100, remaining=0, reset=30", "RateLimit-Reset": "9"}, 30 * time.Second, true},
		{map[string]string{"RateLimit": "limit=100, remaining=3, reset=30", "RateLimit-Reset": "9"}, 9 * time.Second, true},
		// A draft-11 list is not read as a dictionary, nor the reverse.
		{map[string]string{"RateLimit": `"remaining";r=1;t=30`}, 0, false},
		{map[string]string{"RateLimit": `"api";r=0;t=4`}, 4 * time.Second, true},
	}
	for _, tc := range tests {
		h := http.Header{}
		for k, v := range tc.header {
			h.Set(k, v)
		}
		if got, ok := httplimit.ServerWait(h, now); got != tc.want || ok != tc.ok {
			t.Errorf("ServerWait(%v) = %v, %v; want %v, %v", tc.header, got, ok, tc.want, tc.ok)
		}
	}
	// Two field lines are one dictionary.
	h := http.Header{"Ratelimit": {"limit=100, remaining=0", "reset=12"}}
	if got, ok := httplimit.ServerWait(h, now); got != 12*time.Second || !ok {
		t.Errorf("ServerWait(%v) = %v, %v; want 12s, true", h, got, ok)
	}
}

// A client reading the RateLimit field of an exhausted token bucket (no
// Retry-After, as on a 200 that spent the last token) waits for the next
// token, not until the bucket is full: 10/m spent at once has a token
// back in 6 s, full only in 60 s.
func TestServerWaitReadsTheNextUnit(t *testing.T) {
	var st sluice.State
	now := time.Unix(1_700_000_000, 0)
	var d sluice.Decision
	for range 10 {
		d, _, _ = sluice.TokenBucket.Take(&st, sluice.PerMinute(10), now, 1)
	}
	if !d.Allowed || d.Remaining != 0 {
		t.Fatalf("the 10th request: %+v, want the last token", d)
	}
	h := http.Header{}
	httplimit.SetHeaders(h, d, "api", sluice.TokenBucket, sluice.PerMinute(10))
	if got, ok := httplimit.ServerWait(h, now); got != 6*time.Second || !ok {
		t.Errorf("ServerWait(%v) = %v, %v; want 6s, true (the next token)", h, got, ok)
	}
	if got := h.Get("X-RateLimit-Reset"); got != "60" {
		t.Errorf("X-RateLimit-Reset %s, want 60 (until full)", got)
	}
}
