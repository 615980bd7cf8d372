package gatewaytest

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Requests a client shapes to make Sluice fail rather than decide get no
// further than a limited one, in the fail-open variants too (which let a
// request through only when Sluice gives no answer): once the login is
// spent, a second login with a URI or headers too large for Sluice (Caddy
// passes up to 1 MiB of head on, twice the URI, since it keeps the query
// on the question; Sluice answers 431, which Caddy passes on and nginx
// turns into its 503; nginx itself refuses a request line over 8 KiB with
// 414), with the gateway's own forwarding headers named in Connection (to
// have them dropped as hop-by-hop), in lower case (Caddy passes "post" on;
// nginx refuses it), or with an X-HTTP-Method-Override, never reaches the
// app.
func TestGatewayOddRequestsStayLimited(t *testing.T) {
	big := "/login?q=" + strings.Repeat("a", 700<<10)
	forFailModes(t, func(t *testing.T, k kind, open bool) {
		a := startApp(t)
		s := startSluice(t, sluiceYAML(t, k.sluice, ""))
		g := k.start(t, s.addr, a.addr(), variant{failOpen: open})
		addr := strings.TrimPrefix(g.url, "http://")
		for i, tc := range []struct {
			what, req string
			want      []int // the statuses a refusal may have; 429 with the limit's headers
		}{
			{"a 700 KiB URI", "POST " + big + " HTTP/1.1\r\nHost: x\r\n", []int{http.StatusRequestHeaderFieldsTooLarge, http.StatusRequestURITooLong}},
			{"a 7 KiB URI and 21 KiB of headers", "POST /login?q=" + strings.Repeat("a", 7<<10) + " HTTP/1.1\r\nHost: x\r\n" +
				strings.Repeat("X-Pad: "+strings.Repeat("b", 7<<10)+"\r\n", 3), []int{http.StatusTooManyRequests}},
			{"20000 header lines", "POST /login HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X-Pad: b\r\n", 20000),
				[]int{http.StatusTooManyRequests, http.StatusBadRequest}},
			{"Connection naming the forwarding headers", "POST /login HTTP/1.1\r\nHost: x\r\n" +
				"Connection: X-Forwarded-Method, X-Forwarded-Uri, X-Forwarded-For, X-Forwarded-Host\r\n", []int{http.StatusTooManyRequests}},
			{"method post", "post /login HTTP/1.1\r\nHost: x\r\n", []int{http.StatusTooManyRequests, http.StatusBadRequest}},
			{"method Post", "Post /login HTTP/1.1\r\nHost: x\r\n", []int{http.StatusTooManyRequests, http.StatusBadRequest}},
			{"X-HTTP-Method-Override: GET", "POST /login HTTP/1.1\r\nHost: x\r\nX-HTTP-Method-Override: GET\r\n", []int{http.StatusTooManyRequests}},
		} {
			src := fmt.Sprintf("127.0.13.%d", i+1)
			if r := sendRaw(t, src, addr, "POST /login HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"); r.status != http.StatusOK {
				t.Fatalf("%s: first login: got %v, want 200", src, r)
			}
			before := a.hits.Load()
			r := sendRaw(t, src, addr, tc.req+"Content-Length: 0\r\nConnection: close\r\n\r\n")
			if a.hits.Load() != before {
				t.Errorf("a second login, %s: reached the app (%v)", tc.what, r)
				continue
			}
			switch {
			case !slices.Contains(tc.want, r.status):
				t.Errorf("a second login, %s: got %v, want one of %v", tc.what, r, tc.want)
			case r.status == http.StatusTooManyRequests:
				wantLimited(t, "a second login, "+tc.what, r, "login")
			}
		}
	})
}

// A client that fills Sluice's connection cap (api.max_connections) with
// requests a delay rule holds gets no more through than its limit, in
// the fail-open variants too: a request that finds the cap full is
// answered 503 by Sluice, which the gateway passes on (Caddy) or turns
// into its own 503 (nginx); a closed connection would be Sluice down to
// the gateway, which the fail-open variants let through to the app.
func TestGatewayFullConnectionCapStaysLimited(t *testing.T) {
	const rules = "  - name: shaped\n    match: {path: /slow}\n    key: [ip]\n    rate: 1/s\n    action: delay\n    max_delay: 3s\n"
	forFailModes(t, func(t *testing.T, k kind, open bool) {
		a := startApp(t)
		y := replace(t, sluiceYAML(t, k.sluice, ""), "\nclient_ip:", "\napi:\n  max_connections: 2\n\nclient_ip:")
		if !strings.HasSuffix(y, "\n") {
			y += "\n"
		}
		s := startSluice(t, y+rules)
		g := k.start(t, s.addr, a.addr(), variant{failOpen: open})
		addr := strings.TrimPrefix(g.url, "http://")
		res := make([]result, 8)
		var wg sync.WaitGroup
		for i := range res {
			wg.Go(func() {
				res[i] = sendRaw(t, "127.0.14.1", addr, "GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
			})
		}
		wg.Wait()
		for i, r := range res {
			if r.status != http.StatusOK && r.status != http.StatusTooManyRequests && r.status != http.StatusServiceUnavailable {
				t.Errorf("request %d of %d at once: got %v, want 200, 429 or 503", i+1, len(res), r)
			}
		}
		if got := a.hits.Load(); got > 3 {
			t.Errorf("%d requests at once, a connection cap of 2: the app saw %d, over the client's limit of 3", len(res), got)
		}
	})
}
