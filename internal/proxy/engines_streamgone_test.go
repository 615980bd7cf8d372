package proxy_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/h1"
	"github.com/sluicehq/sluice/internal/proxy"
	"github.com/sluicehq/sluice/memstore"
)

// A client that leaves while its answer streams (server-sent events, a
// chunked download, a long body whose upstream pauses between pieces)
// frees its upstream request at once: the upstream sees its request
// cancelled while it still holds the next piece, not when it sends it,
// on every engine and both upstream paths. On the h1 front's fast path,
// which does not watch its client while the handler runs, the watch
// starts once the request is proxy.WatchClientAfter old.
func TestEngineClientGoneWhileStreaming(t *testing.T) {
	kinds := []struct {
		name, ctype string
		length      int  // a Content-Length, 0: none (chunked)
		flushed     bool // the first piece reaches the client before it leaves
	}{
		{"chunked", "text/plain", 0, true},
		{"event-stream", "text/event-stream", 0, true},
		{"length", "application/octet-stream", 1 << 20, false},
	}
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		for _, k := range kinds {
			for _, pa := range paths {
				t.Run(k.name+"/"+pa.name, func(t *testing.T) {
					sent := make(chan struct{}, 1)
					gone := make(chan struct{}, 1)
					release := make(chan struct{})
					up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						io.Copy(io.Discard, r.Body)
						w.Header().Set("Content-Type", k.ctype)
						if k.length > 0 {
							w.Header().Set("Content-Length", strconv.Itoa(k.length))
						}
						io.WriteString(w, "data: 1\n\n")
						w.(http.Flusher).Flush()
						sent <- struct{}{}
						select {
						case <-r.Context().Done():
							gone <- struct{}{}
						case <-release:
						}
					}))
					t.Cleanup(up.Close)
					t.Cleanup(func() { close(release) })
					s := startOn(t, ec, up.URL, engineOpts{proxy: proxy.Options{ResponseHeaderTimeout: 10 * time.Minute}})

					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					var body io.Reader
					if pa.body != "" {
						body = strings.NewReader(pa.body)
					}
					req, err := http.NewRequestWithContext(ctx, pa.method, s.URL+"/stream", body)
					if err != nil {
						t.Fatal(err)
					}
					first := make(chan string, 1)
					go func() {
						resp, err := s.client.Do(req)
						if err != nil {
							first <- err.Error()
							return
						}
						defer resp.Body.Close()
						line, err := bufio.NewReader(resp.Body).ReadString('\n')
						if err != nil {
							line = err.Error()
						}
						first <- line
					}()
					waitFor(t, sent, "the upstream to send the first piece")
					if k.flushed {
						select {
						case got := <-first:
							if got != "data: 1\n" {
								t.Fatalf("first piece %q, want \"data: 1\\n\"", got)
							}
						case <-time.After(safety):
							t.Fatal("the first piece did not reach the client while the upstream held the next")
						}
					}
					cancel() // the client leaves: its connection (HTTP/1) or stream (HTTP/2) ends
					waitFor(t, gone, "the upstream to see its request cancelled after the client left mid-answer (the upstream holds its next piece; response_header_timeout 10m)")
					eventually(t, "the proxy's handler returns", func() bool { return s.active.Load() == 0 })
				})
			}
		}
	})
}

// watchSignals has the proxy signal on the returned channel each time the
// fast path starts watching a client.
func watchSignals(t *testing.T) <-chan struct{} {
	watched := make(chan struct{}, 8)
	proxy.SetTestHookWatching(t, func() {
		select {
		case watched <- struct{}{}:
		default:
		}
	})
	return watched
}

// On the h1 front's fast path, an answer whose head came after the client
// was already watched (the upstream slower than WatchClientAfter) has its
// client watched at once while its body streams: one that leaves then
// frees the upstream request too.
func TestFastPathSlowHeadThenStreamClientGone(t *testing.T) {
	watched := watchSignals(t)
	sent := make(chan struct{}, 1)
	gone := make(chan struct{}, 1)
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-watched: // the proxy watches its client while it waits for this head
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: 1\n\n")
		w.(http.Flusher).Flush()
		sent <- struct{}{}
		select {
		case <-r.Context().Done():
			gone <- struct{}{}
		case <-release:
		}
	}))
	t.Cleanup(up.Close)
	t.Cleanup(func() { close(release) })
	s := startOn(t, engineCases[0], up.URL, engineOpts{proxy: proxy.Options{ResponseHeaderTimeout: 10 * time.Minute}})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+"/stream", nil)
	first := make(chan string, 1)
	go func() {
		resp, err := s.client.Do(req)
		if err != nil {
			first <- err.Error()
			return
		}
		defer resp.Body.Close()
		line, _ := bufio.NewReader(resp.Body).ReadString('\n')
		first <- line
	}()
	waitFor(t, sent, "the upstream to send its head and first piece")
	select {
	case got := <-first:
		if got != "data: 1\n" {
			t.Fatalf("first piece %q, want \"data: 1\\n\"", got)
		}
	case <-time.After(safety):
		t.Fatal("the first piece did not reach the client")
	}
	cancel()
	waitFor(t, gone, "the upstream to see its request cancelled after the client left mid-answer (head slower than WatchClientAfter)")
}

// A client that pipelines its next request behind a streaming answer on
// the h1 front loses no byte of it to the watch of the stream, and is not
// taken for gone: the stream ends whole and the next request is answered,
// whether the next request came with the first (the front holds it: no
// watch) or while the client was watched (the watch reads its first byte,
// which the front then reads first). Over net.Pipe, whose writes return
// once read: the first byte sent alone while watched is the watch's.
func TestFrontPipelinedBehindStream(t *testing.T) {
	for _, whileWatched := range []bool{false, true} {
		t.Run("while watched "+strconv.FormatBool(whileWatched), func(t *testing.T) {
			watched := watchSignals(t)
			release := make(chan struct{})
			cancelled := make(chan string, 2)
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/stream" {
					io.WriteString(w, "answer to "+r.Method+" "+r.URL.Path)
					return
				}
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, "data: 1\n\n")
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					cancelled <- r.URL.Path
					return
				case <-release:
				}
				io.WriteString(w, "data: 2\n\n")
			}))
			t.Cleanup(up.Close)
			c := pipeFront(t, up.URL)
			c.SetDeadline(time.Now().Add(safety))

			const first, next = "GET /stream HTTP/1.1\r\nHost: app.example\r\n\r\n", "GET /next HTTP/1.1\r\nHost: app.example\r\n\r\n"
			if whileWatched {
				io.WriteString(c, first)
			} else {
				io.WriteString(c, first+next)
			}
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("answer to the stream: %v", err)
			}
			body := bufio.NewReader(resp.Body)
			if line, err := body.ReadString('\n'); line != "data: 1\n" || err != nil {
				t.Fatalf("first piece %q %v", line, err)
			}
			waitFor(t, watched, "the proxy to watch the client of the stream (WatchClientAfter)")
			wrote := make(chan error, 1)
			if whileWatched {
				if _, err := io.WriteString(c, next[:1]); err != nil { // returns once the watch has read it
					t.Fatal(err)
				}
				go func() { _, err := io.WriteString(c, next[1:]); wrote <- err }() // read by the front after the stream
			}
			close(release)
			if rest, err := io.ReadAll(body); string(rest) != "\ndata: 2\n\n" || err != nil {
				t.Fatalf("rest of the stream %q %v, want it whole", rest, err)
			}
			resp, err = http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("answer to the pipelined request: %v", err)
			}
			if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || string(b) != "answer to GET /next" {
				t.Fatalf("pipelined request: %d %q, want 200 \"answer to GET /next\"", resp.StatusCode, b)
			}
			if whileWatched {
				if err := <-wrote; err != nil {
					t.Fatal(err)
				}
			}
			select {
			case p := <-cancelled:
				t.Errorf("the upstream saw %s cancelled: a client that pipelined was taken for gone", p)
			default:
			}
		})
	}
}

// pipeFront serves a proxy without rules in front of upstreamURL on the
// h1 front over net.Pipe, and returns the client's end of one connection.
func pipeFront(t *testing.T, upstreamURL string) net.Conn {
	t.Helper()
	u, _ := url.Parse(upstreamURL)
	e, err := engine.New(engine.Options{Store: memstore.New(memstore.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	p, err := proxy.New(proxy.Options{Upstream: u, Engine: func() *engine.Engine { return e },
		ResponseHeaderTimeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	client, server := net.Pipe()
	ln := &oneConnListener{c: make(chan net.Conn, 1), done: make(chan struct{})}
	ln.c <- server
	front := h1.New(&http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second})
	served := make(chan struct{})
	go func() { front.Serve(ln); close(served) }()
	t.Cleanup(func() { client.Close(); front.Close(); <-served })
	return client
}

// oneConnListener hands out the connections in c, then waits for Close.
type oneConnListener struct {
	c    chan net.Conn
	done chan struct{}
	once sync.Once
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.c:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *oneConnListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *oneConnListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }
