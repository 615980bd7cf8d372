package logthrottle

import (
	"context"
	"log"
	"log/slog"
	"strings"
	"time"
)

// NewLogLogger returns a *log.Logger, for an error log such as net/http's
// Server.ErrorLog (a line per failed TLS handshake: a client chooses how
// many), that writes each line to l as a record at level, at most one a
// second of each kind, with suppressed=N, how many of that kind were not
// logged since. A line's kind is the first of kinds it contains, or else
// the one kind of every other line. now is the clock; nil means
// time.Now. A line written while l is not enabled at level is dropped
// uncounted.
func NewLogLogger(l *slog.Logger, level slog.Level, now func() time.Time, kinds ...string) *log.Logger {
	if now == nil {
		now = time.Now
	}
	return log.New(&writer{l: l, level: level, now: now, kinds: kinds, th: make([]Throttle, len(kinds)+1)}, "", 0)
}

// writer passes the lines of a log.Logger on to l (see NewLogLogger).
type writer struct {
	l     *slog.Logger
	level slog.Level
	now   func() time.Time
	kinds []string
	th    []Throttle // one per kind, then the other lines'
}

func (w *writer) Write(p []byte) (int, error) {
	ctx := context.Background()
	if !w.l.Enabled(ctx, w.level) {
		return len(p), nil
	}
	msg := strings.TrimSuffix(string(p), "\n")
	th := &w.th[len(w.kinds)]
	for i, k := range w.kinds {
		if strings.Contains(msg, k) {
			th = &w.th[i]
			break
		}
	}
	if th.OK(w.now()) {
		w.l.Log(ctx, w.level, msg, "suppressed", th.Dropped())
	}
	return len(p), nil
}
