package httplimit_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/httplimit"
)

// stalled is a response body that gives a few bytes and then nothing, as
// a server that stops sending mid-body; Close ends a Read in progress.
type stalled struct {
	io.Reader
	pr     *io.PipeReader
	closes atomic.Int64
}

func newStalled(first string) *stalled {
	pr, _ := io.Pipe() // nothing is ever written
	return &stalled{Reader: io.MultiReader(strings.NewReader(first), pr), pr: pr}
}

func (s *stalled) Close() error {
	s.closes.Add(1)
	return s.pr.Close()
}

// The body of a 429 that stops arriving must not hold the retry: it is
// read during the wait and cut off when the wait ends (after a wait
// shorter than 50ms, 50ms after the answer, to keep the connection of a
// body that has arrived).
func TestRetryTransportStalledBodyDoesNotHoldTheRetry(t *testing.T) {
	for _, tc := range []struct {
		retryAfter string
		want       time.Duration
	}{{"3", 3 * time.Second}, {"0", 50 * time.Millisecond}} {
		srv := newScripted(t, answer{http.StatusTooManyRequests, map[string]string{"Retry-After": tc.retryAfter}}, answer{http.StatusOK, nil})
		inBubble(t, func(t *testing.T) {
			var body *stalled
			base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				resp, err := noKeepAlive().RoundTrip(r)
				if err == nil && resp.StatusCode == http.StatusTooManyRequests {
					resp.Body.Close()
					body = newStalled("Too Many")
					resp.Body = body
				}
				return resp, err
			})
			code, got, took := do(t, &httplimit.RetryTransport{Base: base}, "GET", srv.URL, "", nil)
			if code != http.StatusOK || got != "OK" || took != tc.want {
				t.Errorf("Retry-After: %s: got %d %q after %v, want 200 \"OK\" after %v", tc.retryAfter, code, got, took, tc.want)
			}
			if n := body.closes.Load(); n != 1 {
				t.Errorf("Retry-After: %s: the stalled 429 body was closed %d times, want 1", tc.retryAfter, n)
			}
		})
	}
}

// The same over a real connection: the server sends the 429's header and
// part of its body, then holds the connection open.
func TestRetryTransportStalledBodyOverTheNetwork(t *testing.T) {
	var hits atomic.Int64
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) > 1 {
			io.WriteString(w, "ok")
			return
		}
		w.Header().Set("Retry-After", "0")
		w.Header().Set("Content-Length", "1000")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, "Too Many")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	// The timeout only turns a stall into a failure instead of a hang.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	resp, err := (&httplimit.RetryTransport{Base: tr}).RoundTrip(req)
	if err != nil {
		t.Fatalf("RoundTrip: %v, want the retry's 200", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(b) != "ok" || err != nil {
		t.Errorf("got %d %q (%v), want 200 \"ok\"", resp.StatusCode, b, err)
	}
	if got := hits.Load(); got != 2 {
		t.Errorf("server saw %d requests, want 2", got)
	}
}
