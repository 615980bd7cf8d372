package server_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/h1"
	"github.com/sluicehq/sluice/internal/rules"
)

// A gateway that goes away while its forward-auth question is held by
// action delay ends the wait, on the h1 front as on net/http (which
// cancels the request's context): the answer is not waited out for nobody
// (nor, where the delay waits for a slot to free, a slot taken for it).
func TestForwardAuthDelayGatewayGone(t *testing.T) {
	for _, fast := range []bool{false, true} {
		name := "net/http"
		if fast {
			name = "front"
		}
		t.Run(name, func(t *testing.T) {
			h := memHandler(t, "test.yaml",
				rules.Spec{Name: "held", Rate: "1/4m", Burst: 1, Action: "delay", MaxDelay: 5 * time.Minute, Algorithm: "leaky_bucket"})
			returned := make(chan string, 2)
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				h.ServeHTTP(w, r)
				returned <- r.Header.Get("X-Forwarded-Uri")
			})}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			if fast {
				f := h1.New(srv)
				go func() { f.Serve(ln); close(done) }()
				t.Cleanup(func() { f.Close(); <-done })
			} else {
				go func() { srv.Serve(ln); close(done) }()
				t.Cleanup(func() { srv.Close(); <-done })
			}
			ask := func(uri string) net.Conn {
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				io.WriteString(c, "GET /v1/forward-auth HTTP/1.1\r\nHost: sluice\r\nX-Forwarded-Uri: "+uri+"\r\n\r\n")
				return c
			}
			c := ask("/first")
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != 200 {
				t.Fatalf("first forward-auth: %v %v, want 200", resp, err)
			}
			c.Close()
			<-returned
			c = ask("/held") // its slot leaves 4 minutes after the first
			// The question is in the handler once the engine has decided
			// to wait; the test cannot see that, so it closes at once: a
			// close before the handler starts ends it the same way.
			c.Close()
			select {
			case <-returned:
			case <-time.After(30 * time.Second): // a bound, not a threshold: the wait is 4 minutes
				t.Fatal("the held forward-auth of a gateway that went away is still waited out")
			}
		})
	}
}

// A URI the app behind the gateway routes under a prefix rule's path,
// reading it segment by segment as sent (Go's ServeMux with %2E%2E and
// ..%2F, Express with ..), counts under that rule here too.
func TestForwardAuthSegmentView(t *testing.T) {
	h := memHandler(t, "test.yaml", rules.Spec{Name: "api", Match: rules.MatchSpec{Path: "/api/*"}, Rate: "1/m", Algorithm: "fixed_window"})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	ask := func(uri string) int {
		req, _ := http.NewRequest("GET", srv.URL+"/v1/forward-auth", nil)
		req.Header.Set("X-Forwarded-Uri", uri)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := ask("/api/x"); got != 200 {
		t.Fatalf("forward-auth /api/x: %d, want 200", got)
	}
	for _, uri := range []string{"/api/%2E%2E/x", "/api/..%2Fx", "/api/../x", "/api/.%2e/x?q=1"} {
		if got := ask(uri); got != http.StatusTooManyRequests {
			t.Errorf("forward-auth %s after /api/x spent the limit: %d, want 429 (the app routes it under /api/)", uri, got)
		}
	}
	if got := ask("/x"); got != 200 {
		t.Errorf("forward-auth /x: %d, want 200 (no rule)", got)
	}
}
