package httplimit_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// denyServer serves a middleware of one limit, 1 a minute for everyone,
// with deny as its DenyHandler, in front of a handler that answers "ok".
func denyServer(t *testing.T, deny func(http.ResponseWriter, *http.Request, sluice.Decision)) *httptest.Server {
	t.Helper()
	lim := mustLimiter(t, memstore.New(memstore.Options{}), sluice.FixedWindow, sluice.PerMinute(1))
	mw := httplimit.Middleware(httplimit.Options{
		Limiter:     lim,
		Name:        "api",
		KeyFunc:     func(*http.Request) (string, bool) { return "everyone", true },
		DenyHandler: deny,
	})
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })))
	t.Cleanup(srv.Close)
	return srv
}

// deniedGet sends a GET to url and returns the status, the body and a header.
func deniedGet(t *testing.T, url, header string) (int, string, string, error) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header.Get(header), err
}

// A DenyHandler writes the answer to a denied request, given the denying
// decision, with the rate-limit headers already set.
func TestDenyHandlerWritesTheAnswer(t *testing.T) {
	var got sluice.Decision
	srv := denyServer(t, func(w http.ResponseWriter, r *http.Request, d sluice.Decision) {
		got = d
		w.WriteHeader(http.StatusForbidden)
		io.WriteString(w, "go away")
	})
	if code, body, _, err := deniedGet(t, srv.URL, ""); err != nil || code != http.StatusOK || body != "ok" {
		t.Fatalf("first request: %d %q %v, want 200 \"ok\"", code, body, err)
	}
	code, body, remaining, err := deniedGet(t, srv.URL, "X-RateLimit-Remaining")
	if err != nil || code != http.StatusForbidden || body != "go away" || remaining != "0" {
		t.Errorf("denied request: %d %q X-RateLimit-Remaining %q %v, want 403 \"go away\" with 0", code, body, remaining, err)
	}
	if got.Allowed || got.RetryAfter <= 0 {
		t.Errorf("DenyHandler was given %+v, want the denying decision", got)
	}
}

// A DenyHandler that writes nothing (it only counts or logs the denial)
// does not turn the denial into net/http's empty 200: the request gets
// the 429 that WriteLimited writes.
func TestDenyHandlerWritingNothing(t *testing.T) {
	calls := 0
	srv := denyServer(t, func(http.ResponseWriter, *http.Request, sluice.Decision) { calls++ })
	deniedGet(t, srv.URL, "")
	code, body, retryAfter, err := deniedGet(t, srv.URL, "Retry-After")
	if err != nil || code != http.StatusTooManyRequests || retryAfter == "" {
		t.Errorf("denied request: %d %q Retry-After %q %v, want 429 with Retry-After", code, body, retryAfter, err)
	}
	if calls != 1 {
		t.Errorf("DenyHandler called %d times, want 1", calls)
	}
}

// A DenyHandler can still hijack the connection (to drop an abusive
// client without an answer), and nothing is written after it.
func TestDenyHandlerHijacks(t *testing.T) {
	srv := denyServer(t, func(w http.ResponseWriter, r *http.Request, d sluice.Decision) {
		hj, ok := w.(http.Hijacker)
		if !ok {
			t.Error("the DenyHandler's ResponseWriter is not an http.Hijacker")
			return
		}
		conn, _, err := hj.Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		conn.Close()
	})
	deniedGet(t, srv.URL, "")
	if code, _, _, err := deniedGet(t, srv.URL, ""); err == nil {
		t.Errorf("denied request dropped by its DenyHandler: got %d, want a broken connection", code)
	}
}

// A HEAD request counts as a GET does, and a denied one gets the 429's
// status and headers (Content-Length the body a GET would get) without
// the body.
func TestHeadRequestDenied(t *testing.T) {
	srv := denyServer(t, nil)
	var codes []int
	for range 2 {
		resp, err := http.Head(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
		if len(b) != 0 {
			t.Errorf("HEAD answer %d has a body: %q", resp.StatusCode, b)
		}
		if resp.StatusCode == http.StatusTooManyRequests {
			if resp.Header.Get("Retry-After") == "" || resp.Header.Get("X-RateLimit-Remaining") != "0" || resp.ContentLength <= 0 {
				t.Errorf("denied HEAD: headers %v, want Retry-After, X-RateLimit-Remaining 0 and the JSON body's Content-Length", resp.Header)
			}
		}
	}
	if codes[0] != http.StatusOK || codes[1] != http.StatusTooManyRequests {
		t.Errorf("two HEADs under 1 a minute: got %v, want [200 429]", codes)
	}
}
