package httplimit

import (
	"net/http"
	"net/textproto"
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
		SetHeaders(h, d, "p", c.lim)
		if h.Get(HeaderLimit) != "10" || h.Get(HeaderRemaining) != "10" {
			t.Errorf("%v %v: Limit %s, Remaining %s; want 10 and 10", c.alg, c.lim, h.Get(HeaderLimit), h.Get(HeaderRemaining))
		}
		if got, want := h.Get(HeaderRateLimit), `"p";r=10;t=1`; got != want {
			t.Errorf("%v %v: RateLimit %q, want %q", c.alg, c.lim, got, want)
		}
	}
}
