package listener

import (
	"net/http"
	"sync/atomic"
	"time"
)

// stallH2 bounds each write of an HTTP/2 answer by d (send_timeout): a
// client that stops reading one stream stalls it by flow control, not
// the connection (whose other streams go on, so Write's deadline on the
// socket never passes), and would hold the handler — through the proxy
// an upstream connection — for as long as it likes. A write of the
// answer (the proxy's are up to 32 KiB) that has not finished after d
// resets the stream, which fails it. HTTP/1 answers are bounded on the
// connection (conn.Write). d <= 0 returns h.
func stallH2(h http.Handler, d time.Duration) http.Handler {
	if d <= 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor < 2 {
			h.ServeHTTP(w, r)
			return
		}
		sw := &stallWriter{ResponseWriter: w, d: d}
		defer sw.stop()
		h.ServeHTTP(sw, r)
	})
}

// stallWriter is an HTTP/2 answer whose writes and flushes each end
// within d, or reset the stream.
type stallWriter struct {
	http.ResponseWriter
	d       time.Duration
	timer   *time.Timer // armed while a write or flush is under way
	writing atomic.Bool
}

func (w *stallWriter) Write(b []byte) (int, error) {
	w.start()
	n, err := w.ResponseWriter.Write(b)
	w.done()
	return n, err
}

// FlushError flushes, bounded as a write (http.ResponseController and
// ReverseProxy flush through it).
func (w *stallWriter) FlushError() error {
	w.start()
	err := http.NewResponseController(w.ResponseWriter).Flush()
	w.done()
	return err
}

func (w *stallWriter) Flush() { w.FlushError() }

// Unwrap lets http.ResponseController reach the stream's own methods.
func (w *stallWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *stallWriter) start() {
	if w.timer == nil {
		w.timer = time.AfterFunc(w.d, w.stalled)
	} else {
		w.timer.Reset(w.d)
	}
	w.writing.Store(true)
}

func (w *stallWriter) done() {
	w.writing.Store(false)
	w.timer.Stop()
}

func (w *stallWriter) stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
}

// stalled resets the stream of a write still under way after d: a write
// deadline in the past does so at once.
func (w *stallWriter) stalled() {
	if w.writing.Load() {
		http.NewResponseController(w.ResponseWriter).SetWriteDeadline(time.Unix(1, 0))
	}
}
