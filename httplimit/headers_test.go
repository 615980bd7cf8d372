package httplimit

import (
	"net/http"
	"net/textproto"
	"testing"
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
