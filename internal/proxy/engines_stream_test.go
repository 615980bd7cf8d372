package proxy_test

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func readAll(resp *http.Response) (string, error) {
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// waitFor waits for ch, failing the test after safety (a bound on a hang,
// not a timing assertion).
func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(safety):
		t.Fatalf("gave up waiting: %s", what)
	}
}

// Responses stream on every engine: the client reads the first piece
// while the upstream still holds the rest — a chunked body, server-sent
// events (also with a Content-Length) — for a GET (the fast path where
// the engine has it) and a POST with a body (ReverseProxy).
func TestEngineStreaming(t *testing.T) {
	kinds := []struct{ name, ctype, length string }{
		{"chunked", "text/plain", ""},
		{"event-stream", "text/event-stream", ""},
		{"event-stream with a length", "text/event-stream; charset=utf-8", strconv.Itoa(len("data: 1\n\ndata: 2\n\n"))},
	}
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		for _, k := range kinds {
			for _, pa := range paths {
				t.Run(k.name+"/"+pa.name, func(t *testing.T) {
					release := make(chan struct{})
					var once sync.Once
					t.Cleanup(func() { once.Do(func() { close(release) }) })
					up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						io.Copy(io.Discard, r.Body)
						w.Header().Set("Content-Type", k.ctype)
						if k.length != "" {
							w.Header().Set("Content-Length", k.length)
						}
						io.WriteString(w, "data: 1\n\n")
						w.(http.Flusher).Flush()
						select {
						case <-release:
						case <-r.Context().Done():
							return
						}
						io.WriteString(w, "data: 2\n\n")
					}))
					t.Cleanup(up.Close)
					s := startOn(t, ec, up.URL, engineOpts{})
					var body io.Reader
					if pa.body != "" {
						body = strings.NewReader(pa.body)
					}
					req, _ := http.NewRequest(pa.method, s.URL+"/events", body)
					resp, err := s.client.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					defer resp.Body.Close()
					s.wantProto(t, resp)
					got := make(chan string, 1)
					br := bufio.NewReader(resp.Body)
					go func() {
						var b strings.Builder
						for range 2 {
							line, _ := br.ReadString('\n')
							b.WriteString(line)
						}
						got <- b.String()
					}()
					select {
					case first := <-got:
						if first != "data: 1\n\n" {
							t.Fatalf("first event %q", first)
						}
					case <-time.After(safety):
						t.Fatal("the first event did not reach the client while the upstream held the second")
					}
					once.Do(func() { close(release) })
					if rest, err := io.ReadAll(br); string(rest) != "data: 2\n\n" || err != nil {
						t.Errorf("rest of the stream: %q %v", rest, err)
					}
					if resp.Header.Get("X-RateLimit-Limit") != "1000" {
						t.Errorf("X-RateLimit-Limit %q, want 1000", resp.Header.Get("X-RateLimit-Limit"))
					}
				})
			}
		}
	})
}

// bigPart is the size of each half of the large bodies below: more than
// any buffer on the way (the front's, net/http's, HTTP/2's windows,
// ReverseProxy's 32 KiB), so that a proxy holding a whole body would hang.
const bigPart = 2 << 20

// held bounds what the buffers on the way (ReverseProxy's or the fast
// path's 32 KiB, the server's write buffers, a TLS record) may hold of a
// body of known length that is not flushed.
const held = 64 << 10

// Large answers stream on every engine, with a Content-Length too: the
// client gets the first half while the upstream waits to send the second
// until the client has it. A proxy that held the whole body first would
// never deliver the first half. A body of known length is not flushed
// piece by piece (as ReverseProxy's FlushInterval 0): up to a few buffers'
// worth (held) of what came last may wait for the next bytes; a chunked
// one is flushed as it comes, so all of it arrives.
func TestEngineLargeResponseStreams(t *testing.T) {
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		for _, pa := range paths {
			for _, length := range []bool{true, false} {
				t.Run(pa.name+"/length "+strconv.FormatBool(length), func(t *testing.T) {
					gotHalf := make(chan struct{})
					var once sync.Once
					t.Cleanup(func() { once.Do(func() { close(gotHalf) }) })
					half := bytes.Repeat([]byte("a"), bigPart)
					up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						io.Copy(io.Discard, r.Body)
						if length {
							w.Header().Set("Content-Length", strconv.Itoa(2*bigPart))
						}
						w.Write(half)
						select {
						case <-gotHalf:
						case <-r.Context().Done():
							return
						}
						w.Write(bytes.Repeat([]byte("b"), bigPart))
					}))
					t.Cleanup(up.Close)
					s := startOn(t, ec, up.URL, engineOpts{})
					var body io.Reader
					if pa.body != "" {
						body = strings.NewReader(pa.body)
					}
					req, _ := http.NewRequest(pa.method, s.URL+"/big", body)
					resp, err := s.client.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					defer resp.Body.Close()
					s.wantProto(t, resp)
					first := make(chan error, 1)
					n := bigPart
					if length {
						n -= held
					}
					buf := make([]byte, n)
					go func() { _, err := io.ReadFull(resp.Body, buf); first <- err }()
					select {
					case err := <-first:
						if err != nil || !bytes.Equal(buf, half[:n]) {
							t.Fatalf("first half: %v", err)
						}
					case <-time.After(safety):
						t.Fatal("the first half did not reach the client while the upstream held the second")
					}
					once.Do(func() { close(gotHalf) })
					rest, err := io.ReadAll(resp.Body)
					if want := append(half[n:], bytes.Repeat([]byte("b"), bigPart)...); err != nil || !bytes.Equal(rest, want) {
						t.Errorf("the rest: %d bytes %v, want %d: the first half's end, then b", len(rest), err, len(want))
					}
				})
			}
		}
	})
}

// Large uploads stream on every engine, with a Content-Length and
// chunked: the upstream reads the first half while the client still
// holds the second, and gets the body whole.
func TestEngineLargeUploadStreams(t *testing.T) {
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		for _, length := range []bool{true, false} {
			t.Run("length "+strconv.FormatBool(length), func(t *testing.T) {
				upGotHalf := make(chan struct{})
				total := make(chan int, 1)
				up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					buf := make([]byte, bigPart)
					if _, err := io.ReadFull(r.Body, buf); err != nil {
						t.Errorf("upstream: first half: %v", err)
						return
					}
					close(upGotHalf)
					n, err := io.Copy(io.Discard, r.Body)
					if err != nil {
						t.Errorf("upstream: second half: %v", err)
					}
					total <- bigPart + int(n)
					io.WriteString(w, "got it")
				}))
				t.Cleanup(up.Close)
				s := startOn(t, ec, up.URL, engineOpts{})
				pr, pw := io.Pipe()
				t.Cleanup(func() { pw.Close() })
				req, _ := http.NewRequest("POST", s.URL+"/upload", pr)
				if length {
					req.ContentLength = 2 * bigPart
				}
				go func() {
					if _, err := pw.Write(bytes.Repeat([]byte("a"), bigPart)); err != nil {
						return
					}
					select {
					case <-upGotHalf:
					case <-time.After(safety):
						pw.CloseWithError(io.ErrNoProgress)
						return
					}
					pw.Write(bytes.Repeat([]byte("b"), bigPart))
					pw.Close()
				}()
				resp, body := s.do(t, req)
				s.wantProto(t, resp)
				if resp.StatusCode != 200 || body != "got it" {
					t.Fatalf("upload: %d %q, want 200 got it (the upstream must read the first half before the client sends the second)", resp.StatusCode, body)
				}
				if n := <-total; n != 2*bigPart {
					t.Errorf("the upstream got %d bytes, want %d", n, 2*bigPart)
				}
			})
		}
	})
}
