package proxy

import (
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/logthrottle"
)

// logUpstream logs the upstream's failure to answer r, at most once a
// second with the number of failures unlogged since: while the upstream
// fails, every request fails, and a client choosing its requests must not
// be able to flood the log. The path is cut, and left out of the error.
func (p *Proxy) logUpstream(r *http.Request, err error) {
	if !p.upLog.OK(p.o.Now()) {
		return
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // without the URL, which holds the path
	}
	p.o.Logger.Warn("upstream", "method", cut(r.Method), "path", cut(r.URL.Path), "err", err,
		"suppressed", p.upLog.Dropped())
}

// logDefer logs a failure to queue a request of the defer rule named
// rule, at most once a second: while Redis is down every request the rule
// refuses fails so.
func (p *Proxy) logDefer(rule string, err error) {
	if p.deferLog.OK(p.o.Now()) {
		p.o.Logger.Warn("defer: enqueue", "rule", rule, "err", err, "suppressed", p.deferLog.Dropped())
	}
}

// logClient logs, at debug level, a request whose body the client got
// wrong (stalled, unreadable), at most once a second per kind (th) with
// the number unlogged since: a client chooses how many there are.
func (p *Proxy) logClient(th *logthrottle.Throttle, msg string, r *http.Request, args ...any) {
	if !p.o.Logger.Enabled(r.Context(), slog.LevelDebug) || !th.OK(p.o.Now()) {
		return
	}
	args = append([]any{"method", cut(r.Method), "path", cut(r.URL.Path)}, args...)
	p.o.Logger.Debug(msg, append(args, "suppressed", th.Dropped())...)
}

// maxLogValue bounds how much of a client's input a log line quotes.
const maxLogValue = 256

// cut returns s, cut to maxLogValue bytes (between characters) and marked
// with its length when longer.
func cut(s string) string {
	if len(s) <= maxLogValue {
		return s
	}
	n := maxLogValue
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "… (" + strconv.Itoa(len(s)) + " bytes)"
}
