package httplimit_test

import (
	"net/http"
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
		{map[string]string{"X-RateLimit-Reset": "30"}, 0, false},
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
}

// The RateLimit field SetHeaders writes reads back: for a denied decision
// (r=0) its t is the rounded-up RetryAfter, whatever the policy's name.
func FuzzRateLimitReset(f *testing.F) {
	f.Add("api", int64(0), int64(1500))
	f.Add(`a"b\c,d;e=f`, int64(0), int64(37000))
	f.Add("per-ip", int64(3), int64(0))
	f.Fuzz(func(t *testing.T, policy string, remaining, retryMs int64) {
		if remaining < 0 || retryMs < 0 || retryMs > 1<<40 {
			return
		}
		d := sluice.Decision{Allowed: remaining > 0, Remaining: remaining,
			RetryAfter: time.Duration(retryMs) * time.Millisecond, ResetAfter: time.Minute}
		if d.Allowed {
			d.RetryAfter = 0
		}
		h := http.Header{}
		httplimit.SetHeaders(h, d, policy, sluice.PerMinute(10))
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
