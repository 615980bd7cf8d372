package gatewaytest

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// expectClient is client(src) that, for a request with Expect:
// 100-continue, waits for the server's word before sending the body (a
// minute: a hang guard, not a measurement).
func expectClient(src string) *http.Client {
	c := client(src)
	c.Transport.(*http.Transport).ExpectContinueTimeout = time.Minute
	return c
}

// HEAD is counted and limited like GET, with the same headers (and no
// body); a limited POST's body never reaches the app, however large.
func TestGatewayHeadAndPost(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			a := startApp(t)
			s := startSluice(t, sluiceYAML(t, k.sluice, ""))
			g := k.start(t, s.addr, a.addr(), variant{})
			c := client("127.0.0.10")
			for i := range 3 {
				r := send(t, c, "HEAD", g.url+"/items", nil)
				if r.status != http.StatusOK || r.body != "" {
					t.Fatalf("HEAD %d: got %v, want 200 without a body", i+1, r)
				}
				if got := r.header.Get("X-RateLimit-Remaining"); got != strconv.Itoa(2-i) {
					t.Errorf("HEAD %d: X-RateLimit-Remaining = %q, want %d (%v)", i+1, got, 2-i, r)
				}
				if got := r.header.Get("RateLimit"); !strings.HasPrefix(got, fmt.Sprintf(`"per-client";r=%d;t=`, 2-i)) {
					t.Errorf("HEAD %d: RateLimit = %q (%v)", i+1, got, r)
				}
			}
			r := send(t, c, "HEAD", g.url+"/items", nil)
			if r.status != http.StatusTooManyRequests || r.body != "" {
				t.Fatalf("HEAD 4: got %v, want 429 without a body", r)
			}
			if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 || r.header.Get("X-RateLimit-Retry-After") != r.header.Get("Retry-After") {
				t.Errorf("HEAD 4: Retry-After %q, X-RateLimit-Retry-After %q, want the same whole seconds >= 1", r.header.Get("Retry-After"), r.header.Get("X-RateLimit-Retry-After"))
			}
			if got := r.header.Get("RateLimit"); !strings.HasPrefix(got, `"per-client";r=0;t=`) || r.header.Get("X-RateLimit-Remaining") != "0" {
				t.Errorf("HEAD 4: RateLimit %q, X-RateLimit-Remaining %q, want per-client's with 0 left", got, r.header.Get("X-RateLimit-Remaining"))
			}
			body := bytes.Repeat([]byte("x"), 1<<20)
			// Sent whole at once, the body may still be on its way when
			// the gateway has answered 429 and closed: the client then
			// sees its write reset instead of the answer (a race in the
			// client, not the gateway's doing). Either way nothing may
			// reach the app.
			req, err := http.NewRequest("POST", g.url+"/upload?part=1", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			if resp, err := c.Do(req); err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusTooManyRequests {
					t.Errorf("a 1 MiB POST, limited: %d, want 429", resp.StatusCode)
				}
			} else if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
				t.Errorf("a 1 MiB POST, limited: %v, want 429 or the body's write reset", err)
			}
			// Sent after Expect: 100-continue, the body waits for the
			// gateway's word: the answer is the 429, every time.
			r = sendBody(t, expectClient("127.0.0.10"), g.url+"/upload?part=2", body, "Expect", "100-continue")
			wantLimited(t, "a 1 MiB POST after Expect: 100-continue, limited", r, "per-client")
			if got := a.hits.Load(); got != 3 {
				t.Errorf("the app saw %d requests, want 3", got)
			}
		})
	}
}
