package httplimit_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// answer is one scripted reply of a scripted server.
type answer struct {
	status int
	header map[string]string
}

// scripted is a real HTTP server that answers its requests from a script,
// the last answer repeating, and records what it received.
type scripted struct {
	*httptest.Server
	mu     sync.Mutex
	script []answer
	bodies []string
	auths  []string // the Authorization header of each request
	hits   atomic.Int64
}

func newScripted(t *testing.T, script ...answer) *scripted {
	t.Helper()
	s := &scripted{script: script}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		n := s.hits.Add(1)
		s.mu.Lock()
		s.bodies = append(s.bodies, string(body))
		s.auths = append(s.auths, r.Header.Get("Authorization"))
		a := s.script[min(int(n), len(s.script))-1]
		s.mu.Unlock()
		for k, v := range a.header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(a.status)
		io.WriteString(w, http.StatusText(a.status))
	}))
	t.Cleanup(s.Close)
	return s
}

// inBubble runs f in a synctest bubble, where the waits take no real time.
// Its transports must not keep idle connections: a goroutine blocked
// reading a network connection is not durably blocked, so the bubble's
// clock would never advance.
func inBubble(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	synctest.Test(t, f)
}

func noKeepAlive() *http.Transport { return &http.Transport{DisableKeepAlives: true} }

// do sends a GET (or the method and body given) through rt and returns
// the status, the body and the time it took on the bubble's clock.
func do(t *testing.T, rt http.RoundTripper, method, url, body string, hdr map[string]string) (int, string, time.Duration) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	start := time.Now()
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, url, err)
	}
	return resp.StatusCode, string(b), time.Since(start)
}

// getWithin sends GET url through rt's RoundTrip under a context whose
// deadline is within from now, and returns the answer's status (its body
// closed), how long RoundTrip took, and its error (status 0 with one).
// In a bubble (inBubble) took is exact.
func getWithin(t *testing.T, rt http.RoundTripper, url string, within time.Duration) (int, time.Duration, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	resp, err := rt.RoundTrip(req)
	took := time.Since(start)
	if err != nil {
		return 0, took, err
	}
	resp.Body.Close()
	return resp.StatusCode, took, nil
}

// refusedOnce is a real server that answers its first request with first
// (a 429 of some kind) and every later one 200 "ok"; hits counts them.
func refusedOnce(t *testing.T, first http.HandlerFunc) (srv *httptest.Server, hits *atomic.Int64) {
	t.Helper()
	hits = new(atomic.Int64)
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) > 1 {
			io.WriteString(w, "ok")
			return
		}
		first(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, hits
}
