package listener

import (
	"net/http"
	"sync"
	"time"
)

// h2Streams is an HTTP/2 connection's share of its listener's places:
// the requests in flight on it, and the places they hold beyond the
// connection's own (one each but the first, which the connection's place
// covers, as an HTTP/1 connection's covers its request).
type h2Streams struct {
	mu    sync.Mutex
	n     int // requests in flight
	extra int // places held for them: max(0, n−1)

	// The connection's requests ended, and those of them the client
	// reset early (guardResets).
	ended, resets int
	flooded       bool // closed for its resets
}

// take holds one of the listener's places, unless all max are held.
func (l *Listener) take() bool {
	if n := l.open.Add(1); l.max > 0 && n > l.max {
		l.open.Add(-1)
		return false
	}
	return true
}

// enterH2 admits an HTTP/2 request on c, or reports false when the
// listener holds all its places. c nil (a connection not from the
// Listener) takes a place for each request.
func (l *Listener) enterH2(c *conn) bool {
	if c == nil {
		return l.take()
	}
	s := &c.h2
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n > 0 {
		if !l.take() {
			return false
		}
		s.extra++
	}
	s.n++
	return true
}

// leaveH2 ends a request enterH2 admitted.
func (l *Listener) leaveH2(c *conn) {
	if c == nil {
		l.open.Add(-1)
		return
	}
	s := &c.h2
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n--
	if s.extra > 0 {
		s.extra--
		l.open.Add(-1)
	}
}

// capStreams makes max_connections bound HTTP/2 requests and HTTP/1
// connections together: an HTTP/2 request beyond the first in flight on
// its connection holds a place of the listener, as a connection does,
// and is answered 503 at once when all are held. An HTTP/1 connection
// serves one request at a time, so its own place bounds its requests; an
// HTTP/2 connection carries up to 250 at once, each a goroutine (and
// through the proxy an upstream connection) held as long as its body
// trickles in. Capped apart, as they were, HTTP/2 requests ran up to
// max_connections besides the HTTP/1 connections' (about twice the
// bound); and uncapped, 250 times it. l.max <= 0 returns h.
func (l *Listener) capStreams(h http.Handler) http.Handler {
	if l.max <= 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor < 2 {
			h.ServeHTTP(w, r)
			return
		}
		c, _ := r.Context().Value(connKey{}).(*conn)
		if !l.enterH2(c) {
			l.metrics.RequestRefused()
			writeOverloaded(w)
			return
		}
		defer l.leaveH2(c)
		h.ServeHTTP(w, r)
	})
}

// Early resets (HTTP/2 rapid reset, CVE-2023-44487): a client that opens
// streams and resets each at once costs itself nothing, while each stream
// starts a handler. net/http runs at most 250 of a connection's handlers
// at once and skips those of streams reset before they started, but
// starts the next as soon as one returns, so one connection could keep
// the server starting handlers (deciding, dialling the upstream) without
// end. As Envoy does (overload.premature_reset_total_stream_count and
// premature_reset_min_stream_lifetime_seconds), a connection that has
// carried minResetCheck requests, more than half of which its client
// reset within earlyReset of their start, is closed. Below that count a
// client may cancel as it likes (a browser's search-as-you-type cancels
// each fetch at the next keystroke); a flood starts at most minResetCheck
// handlers and those in flight before it is cut.
const (
	minResetCheck = 500
	earlyReset    = time.Second
)

// guardResets closes the HTTP/2 connection of a client that resets its
// requests early, as the comment above says, and counts it. A request
// whose context is done when its handler returns was reset by the client
// (or its connection ended): net/http cancels it on a RST_STREAM, and
// only after the handler returns otherwise.
func (l *Listener) guardResets(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor < 2 {
			h.ServeHTTP(w, r)
			return
		}
		c, _ := r.Context().Value(connKey{}).(*conn)
		if c == nil {
			h.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		var hw *headWriter
		if r.Method == http.MethodHead {
			hw = &headWriter{ResponseWriter: w, r: r}
			w = hw
		}
		h.ServeHTTP(w, r)
		reset := r.Context().Err() != nil
		if hw != nil && hw.wrote {
			reset = hw.resetBefore
		}
		early := reset && time.Since(start) < earlyReset
		if c.h2.end(early) {
			l.metrics.ResetFlood()
			c.Close()
		}
	})
}

// end counts a request ended (reset early or not), and reports whether
// the connection has now reset too many to keep: once.
func (s *h2Streams) end(early bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended++
	if early {
		s.resets++
	}
	if s.flooded || s.ended < minResetCheck || 2*s.resets <= s.ended {
		return false
	}
	s.flooded = true
	return true
}

// headWriter is a HEAD request's answer. Its stream ends as soon as its
// headers go out (a HEAD answer has no body), when a handler flushes them
// or writes a body past net/http's buffer, and net/http then cancels the
// request's context while the handler still runs: the client reset
// nothing. resetBefore tells whether it had when the handler began its
// answer, which guardResets counts instead of the context's end.
type headWriter struct {
	http.ResponseWriter
	r           *http.Request
	wrote       bool // the handler wrote, or flushed, the final headers
	resetBefore bool // the request's context was done by then
}

// answer records the start of the answer, once.
func (w *headWriter) answer() {
	if !w.wrote {
		w.wrote = true
		w.resetBefore = w.r.Context().Err() != nil
	}
}

func (w *headWriter) WriteHeader(code int) {
	if code >= 200 {
		w.answer()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *headWriter) Write(b []byte) (int, error) {
	w.answer()
	return w.ResponseWriter.Write(b)
}

// FlushError flushes through the writer under it (http.ResponseController
// and ReverseProxy flush through it).
func (w *headWriter) FlushError() error {
	w.answer()
	return http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *headWriter) Flush() { w.FlushError() }

// Unwrap lets http.ResponseController reach the stream's own methods.
func (w *headWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
