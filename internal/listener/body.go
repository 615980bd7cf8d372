package listener

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/metrics"
)

// ErrBodyTimeout is the error of a request body read that got no data for
// the body read timeout. Check for it with errors.Is.
var ErrBodyTimeout = errors.New("request body stalled: no data within body_read_timeout")

// BodyTimeout wraps h so that a request body that sends nothing for d is
// cut: every read of the body may wait at most d for data, so a large
// upload that keeps moving is never cut, however long it takes in all.
// A cut body's read returns an error wrapping ErrBodyTimeout (and
// os.ErrDeadlineExceeded); the connection is closed after the answer,
// and the timeout is counted in m (nil: nowhere). If h answers without
// reading the body at all, the server's discarding of it is bounded the
// same way. d <= 0 returns h.
//
// The wait is enforced with the connection's read deadline
// (http.ResponseController.SetReadDeadline); a ResponseWriter that does
// not support it leaves the body unbounded.
func BodyTimeout(h http.Handler, d time.Duration, m *metrics.Listener) http.Handler {
	if d <= 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			h.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if rc.SetReadDeadline(time.Now().Add(d)) != nil {
			h.ServeHTTP(w, r)
			return
		}
		tb := &timedBody{rc: rc, d: d, body: r.Body, m: m}
		r2 := r.WithContext(context.WithValue(r.Context(), timedKey{}, tb))
		r2.Body = tb
		h.ServeHTTP(w, r2)
	})
}

type timedKey struct{}

// TimedOut reports whether r's body (as BodyTimeout wrapped it) was cut
// for stalling. The proxy uses it to answer 408 rather than blame the
// upstream.
func TimedOut(r *http.Request) bool {
	tb, _ := r.Context().Value(timedKey{}).(*timedBody)
	return tb != nil && tb.timedOut.Load()
}

// timedBody moves the read deadline d ahead before each read. Reads of a
// request body are not concurrent with each other, but the proxy's
// transport reads in its own goroutine while TimedOut may be asked from
// the handler's: timedOut is atomic.
type timedBody struct {
	rc       *http.ResponseController
	d        time.Duration
	body     io.ReadCloser
	m        *metrics.Listener
	timedOut atomic.Bool
}

func (b *timedBody) Read(p []byte) (int, error) {
	if b.timedOut.Load() {
		return 0, fmt.Errorf("%w: %w", ErrBodyTimeout, os.ErrDeadlineExceeded)
	}
	b.rc.SetReadDeadline(time.Now().Add(b.d))
	n, err := b.body.Read(p)
	if err != nil && isTimeout(err) {
		b.timedOut.Store(true)
		b.m.BodyTimeout()
		return n, fmt.Errorf("%w: %w", ErrBodyTimeout, err)
	}
	return n, err
}

func (b *timedBody) Close() error { return b.body.Close() }
