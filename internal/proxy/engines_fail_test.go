package proxy_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/proxy"
	"github.com/sluicehq/sluice/internal/rules"
)

func request(t *testing.T, s *eserved, method, path, body string) *http.Request {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// Upstream failures on every engine, each answered with a JSON error and
// the rule's headers (the request was counted: 9 of 10 left): an upstream
// that refuses connections 502, one silent past response_header_timeout
// 504.
func TestEngineUpstreamDownOrSilent(t *testing.T) {
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		for _, pa := range paths {
			t.Run(pa.name, func(t *testing.T) {
				specs := []rules.Spec{{Name: "r", Rate: "10/m"}}
				s := startOn(t, ec, "http://"+refusedAddr(t), engineOpts{specs: specs})
				resp, body := s.do(t, request(t, s, pa.method, "/", pa.body))
				s.wantProto(t, resp)
				if resp.StatusCode != 502 || body != "{\"error\":\"bad_gateway\"}\n" || resp.Header.Get("X-RateLimit-Remaining") != "9" {
					t.Errorf("upstream down: %d %q remaining %q, want 502 bad_gateway with 9 left", resp.StatusCode, body, resp.Header.Get("X-RateLimit-Remaining"))
				}

				hung := make(chan struct{})
				up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					select {
					case <-hung:
					case <-r.Context().Done():
					}
				}))
				t.Cleanup(up.Close)
				t.Cleanup(func() { close(hung) })
				s = startOn(t, ec, up.URL, engineOpts{specs: specs, proxy: proxy.Options{ResponseHeaderTimeout: 50 * time.Millisecond}})
				resp, body = s.do(t, request(t, s, pa.method, "/", pa.body))
				if resp.StatusCode != 504 || body != "{\"error\":\"gateway_timeout\"}\n" || resp.Header.Get("X-RateLimit-Remaining") != "9" {
					t.Errorf("upstream silent: %d %q remaining %q, want 504 gateway_timeout with 9 left", resp.StatusCode, body, resp.Header.Get("X-RateLimit-Remaining"))
				}
			})
		}
	})
}

// An upstream that breaks off in the middle of its answer's body: the
// client never gets the answer as if it were whole, on every engine —
// its read of the body fails (a short Content-Length body, a chunked one
// without its last chunk).
func TestEngineUpstreamCutMidBody(t *testing.T) {
	heads := map[string]string{
		"length":  "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789",
		"chunked": "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\na\r\n0123456789\r\n",
	}
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		for kind, answer := range heads {
			for _, pa := range paths {
				t.Run(kind+"/"+pa.name, func(t *testing.T) {
					up := serveConns(t, func(c net.Conn) {
						r, err := http.ReadRequest(bufio.NewReader(c))
						if err != nil {
							return
						}
						io.Copy(io.Discard, r.Body)
						io.WriteString(c, answer)
					})
					s := startOn(t, ec, "http://"+up, engineOpts{})
					resp, err := s.client.Do(request(t, s, pa.method, "/", pa.body))
					if err != nil {
						return // cut before the head reached the client: not whole either
					}
					defer resp.Body.Close()
					b, err := io.ReadAll(resp.Body)
					if err == nil {
						t.Errorf("the client read %q as a whole answer (status %d), want an error", b, resp.StatusCode)
					}
				})
			}
		}
	})
}

// An upstream that closes a kept-alive connection as the next request
// comes, without answering: a GET or HEAD is sent again once on a new
// connection (it is idempotent, and nothing of an answer came), a POST is
// not (it may have been acted on) and answers 502; either is counted once.
func TestEngineUpstreamClosesKeptConnection(t *testing.T) {
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		for _, pa := range paths {
			t.Run(pa.name, func(t *testing.T) {
				var mu sync.Mutex
				var seen []string
				up := serveConns(t, func(c net.Conn) {
					br := bufio.NewReader(c)
					for i := 0; ; i++ {
						r, err := http.ReadRequest(br)
						if err != nil {
							return
						}
						io.Copy(io.Discard, r.Body)
						mu.Lock()
						seen = append(seen, r.Method+" "+r.URL.Path)
						mu.Unlock()
						if r.URL.Path == "/second" && i > 0 {
							return // the request read, the connection closed unanswered
						}
						io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
					}
				})
				specs := []rules.Spec{{Name: "r", Rate: "10/m"}}
				s := startOn(t, ec, "http://"+up, engineOpts{specs: specs})
				if resp, body := s.do(t, request(t, s, pa.method, "/first", pa.body)); resp.StatusCode != 200 || body != "ok" {
					t.Fatalf("first: %d %q", resp.StatusCode, body)
				}
				resp, body := s.do(t, request(t, s, pa.method, "/second", pa.body))
				mu.Lock()
				defer mu.Unlock()
				if resp.Header.Get("X-RateLimit-Remaining") != "8" {
					t.Errorf("second: remaining %q, want 8 (counted once)", resp.Header.Get("X-RateLimit-Remaining"))
				}
				idempotent := pa.method == "GET"
				switch {
				case idempotent && (resp.StatusCode != 200 || body != "ok" || len(seen) != 3):
					t.Errorf("GET on a connection the upstream closed: %d %q, upstream saw %q; want 200 ok after one retry", resp.StatusCode, body, seen)
				case !idempotent && (resp.StatusCode != 502 || body != "{\"error\":\"bad_gateway\"}\n" || len(seen) != 2):
					t.Errorf("POST on a connection the upstream closed: %d %q, upstream saw %q; want 502 bad_gateway, not sent again", resp.StatusCode, body, seen)
				}
			})
		}
	})
}

// A client that goes away in the middle of a streamed answer: the
// upstream request is abandoned (its context ends), on every engine and
// both upstream paths — a closed connection on HTTP/1.1, a cancelled
// stream on HTTP/2. net/http notices at once; the h1 front at the first
// write that fails (docs/daemon.md), so the upstream goes on streaming.
func TestEngineClientGoneMidStream(t *testing.T) {
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		for _, pa := range paths {
			t.Run(pa.name, func(t *testing.T) {
				gone, left := make(chan struct{}), make(chan struct{})
				up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					defer close(gone)
					io.Copy(io.Discard, r.Body)
					io.WriteString(w, "first\n")
					w.(http.Flusher).Flush()
					select {
					case <-left:
					case <-r.Context().Done():
						return
					}
					for r.Context().Err() == nil {
						io.WriteString(w, "more\n")
						w.(http.Flusher).Flush()
					}
				}))
				t.Cleanup(up.Close)
				s := startOn(t, ec, up.URL, engineOpts{})
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				req := request(t, s, pa.method, "/s", pa.body).WithContext(ctx)
				resp, err := s.client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || line != "first\n" {
					t.Fatalf("first line %q %v", line, err)
				}
				if ec.h2 {
					cancel() // the stream is reset; the connection stays
				} else {
					s.client.Transport.(*http.Transport).CloseIdleConnections()
					cancel() // HTTP/1.1: the connection is closed
				}
				resp.Body.Close()
				close(left)
				waitFor(t, gone, "the upstream request abandoned after the client went away")
			})
		}
	})
}
