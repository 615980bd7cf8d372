package proxy

import (
	"net/http"
	"net/textproto"
	"slices"
	"strings"
	"testing"
)

// FuzzDropHTTP2Upgrade: whatever the Upgrade lines, none names HTTP/2
// afterwards; every other protocol stays, in order; a header that named
// no HTTP/2 protocol is left exactly as it was.
func FuzzDropHTTP2Upgrade(f *testing.F) {
	for _, s := range []string{"h2c", "websocket", "websocket, h2c", "H2C , h2\nHTTP/2.0", "h2c\nwebsocket", ",,h2c,,", "http/2", "HTTP/1.1, h2", "h2c/1", "", "\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		lines := strings.Split(s, "\n")
		h := http.Header{"Upgrade": slices.Clone(lines)}
		dropHTTP2Upgrade(h)
		var want []string
		named := false
		for _, l := range lines {
			for p := range strings.SplitSeq(l, ",") {
				p = textproto.TrimString(p)
				if http2Protocol(p) {
					named = true
				} else if p != "" {
					want = append(want, p)
				}
			}
		}
		got, ok := h["Upgrade"]
		if !named {
			if !ok || !slices.Equal(got, lines) {
				t.Fatalf("Upgrade %q named no HTTP/2 but became %q", lines, got)
			}
			return
		}
		if len(want) == 0 {
			if ok {
				t.Fatalf("Upgrade %q: nothing but HTTP/2, yet %q is left", lines, got)
			}
			return
		}
		if len(got) != 1 || got[0] != strings.Join(want, ", ") {
			t.Fatalf("Upgrade %q became %q, want %q", lines, got, strings.Join(want, ", "))
		}
		for p := range strings.SplitSeq(got[0], ",") {
			if http2Protocol(textproto.TrimString(p)) {
				t.Fatalf("Upgrade %q still names HTTP/2: %q", lines, got)
			}
		}
	})
}
