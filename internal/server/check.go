package server

import (
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/rules"
	"strings"
	"unicode/utf8"
)

// checkRequest is the body of POST /v1/check (see parseCheck). Cost
// defaults to 1.
type checkRequest struct {
	Rule string `json:"rule"`
	Key  string `json:"key"`
	Cost int64  `json:"cost"`
}

// check answers POST /v1/check: 200 with the decision (over the limit is
// "allowed":false, not an error status), 400 for bad input, 413 for a body
// over MaxBodyBytes, 415 for one with a Content-Encoding (encodingError), 503 when the store cannot decide under on_error deny,
// 499 when the client went away before the store answered.
//
// The key is the caller's: it is counted under the rule's namespace
// (rules.Rule.StoreKey: the rule's name and fingerprint, hashed when long),
// so it never collides with another rule's counters. For a rule with one
// key part, it shares the counter of the requests the proxy keys with that
// value, read as that part of a request is (an ip rule's address by the
// rule's prefix, a path in its canonical form, a Host, method or
// Authorization value as the rule counts it, a query or cookie value
// URL-decoded), so that no spelling of it is a fresh count. The decision never waits: a leaky bucket's shaping delay is
// reported as "delay_ms" (present only when positive), for the caller to
// wait out.
//
// With report (POST /v1/report, the same body and answer), the cost is
// charged even past the limit (engine.Engine.Report): "allowed" says
// whether it fitted, and when it did not, "retry_after_ms" is how long
// until a request of cost 1 is admitted again.
func (h *Handler) check(w http.ResponseWriter, r *http.Request, report bool) {
	if ee := encodingError(r); ee != nil {
		w.Header()["Accept-Encoding"] = identity
		h.fail(w, ee)
		return
	}
	req := checkRequest{Cost: 1}
	bp, err := readBody(w, r, h.o.MaxBodyBytes)
	if err == nil {
		err = parseCheck(*bp, &req)
	}
	bodies.Put(bp)
	if err != nil {
		h.fail(w, decodeError(err))
		return
	}
	e := h.o.Engine()
	switch {
	case req.Rule == "":
		h.fail(w, errBadRequest(`"rule" is required`))
		return
	case req.Key == "":
		h.fail(w, errBadRequest(`"key" is required and must not be empty`))
		return
	case len(req.Key) > h.o.MaxKeyBytes:
		h.fail(w, errBadRequest(`"key" is longer than `+strconv.Itoa(h.o.MaxKeyBytes)+` bytes`))
		return
	case req.Cost < 0:
		h.fail(w, errBadRequest(`"cost" must not be negative`))
		return
	}
	rule := e.Rules().Rule(req.Rule)
	if rule == nil {
		h.fail(w, errBadRequest(unknownRule(req.Rule, e.Rules())))
		return
	}
	var res engine.Result
	if report {
		res = e.Report(r.Context(), rule, rule.StoreKey(req.Key), req.Cost)
	} else {
		res = e.Check(r.Context(), rule, rule.StoreKey(req.Key), req.Cost)
	}
	var d sluice.Decision
	switch {
	case res.Err != nil: // the client went away before the store answered
		h.fail(w, errGone)
		return
	case res.StoreErr != nil && !res.Allowed:
		h.fail(w, errUnavailable)
		return
	case res.StoreErr != nil:
		// on_error allow: allowed, with the rule's limit and nothing known
		// of the counter.
		d = sluice.Decision{Allowed: true, Limit: rule.Limit.Rate}
	default:
		d = res.Decision
	}
	ap := answers.Get().(*[]byte)
	b := append((*ap)[:0], `{"allowed":`...)
	b = strconv.AppendBool(b, res.Allowed)
	b = append(b, `,"limit":`...)
	b = strconv.AppendInt(b, rule.Limit.Rate, 10)
	b = append(b, `,"remaining":`...)
	// At most the limit, as in the X-RateLimit headers (httplimit.SetHeaders):
	// a burst larger than the rate never shows remaining > limit.
	b = strconv.AppendInt(b, min(max(d.Remaining, 0), rule.Limit.Rate), 10)
	b = append(b, `,"retry_after_ms":`...)
	b = strconv.AppendInt(b, retryMillis(res.Allowed, d), 10)
	b = append(b, `,"reset_after_ms":`...)
	b = strconv.AppendInt(b, ceilMillis(d.ResetAfter), 10)
	if d.Delay > 0 {
		b = append(b, `,"delay_ms":`...)
		b = strconv.AppendInt(b, ceilMillis(d.Delay), 10)
	}
	b = append(b, "}\n"...)
	// Its length set here, both servers write the head at once: without
	// it the fast front would keep a copy of the header map for the
	// length it works out at the end (as net/http does, in its own way).
	hdr := w.Header()
	hdr["Content-Type"] = jsonType
	if len(b) < len(contentLengths) {
		hdr["Content-Length"] = contentLengths[len(b)]
	}
	w.Write(b)
	*ap = b
	answers.Put(ap)
}

// jsonType is the Content-Type of the JSON answers, shared: net/http
// copies the header map before writing it and never changes a value.
var jsonType = []string{"application/json"}

// identity is the Accept-Encoding of an answer refusing a body's
// Content-Encoding (encodingError), shared as jsonType is.
var identity = []string{"identity"}

// contentLengths are the Content-Length values of the short answers,
// shared as jsonType is.
var contentLengths = func() (t [256][]string) {
	for n := range t {
		t[n] = []string{strconv.Itoa(n)}
	}
	return t
}()

// answers recycles the buffers /v1/check answers are written into (the
// ResponseWriter is an interface, so a buffer on the stack would escape).
var answers = sync.Pool{New: func() any { b := make([]byte, 0, 192); return &b }}

// retryMillis is retry_after_ms: 0 when allowed; for a request the limit
// can never admit (sluice.Never), -1.
func retryMillis(allowed bool, d sluice.Decision) int64 {
	if allowed {
		return 0
	}
	if d.RetryAfter < 0 {
		return -1
	}
	return ceilMillis(d.RetryAfter)
}

func ceilMillis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// decodeError turns a body reading or parsing error into the API error it
// answers.
func decodeError(err error) error {
	var mbe *http.MaxBytesError
	var ufe *unknownFieldError
	var dfe *duplicateFieldError
	switch {
	case errors.As(err, &mbe):
		return err
	case errors.Is(err, listener.ErrBodyTimeout):
		return errBodyTimeout
	case errors.As(err, &ufe), errors.As(err, &dfe), errors.Is(err, errCostBig), errors.Is(err, errCostNeg), errors.Is(err, errEmpty), errors.Is(err, errTrail), errors.Is(err, errNoObj), errors.Is(err, errCostInt):
		return errBadRequest(err.Error())
	case errors.Is(err, errSyntax):
		return errBadRequest("bad JSON: want {\"rule\":NAME,\"key\":STRING,\"cost\":N}")
	default:
		var ae *apiError
		if errors.As(err, &ae) {
			return err
		}
		return errBadRequest(err.Error())
	}
}

// unknownRule says that no rule is named name: the name quoted and cut to
// rules.MaxNameLen bytes (a rule name is never longer, and the answer must
// not echo a 64 KiB body back), and a few of the rules that exist.
func unknownRule(name string, set *rules.Set) string {
	var b strings.Builder
	b.WriteString("unknown rule ")
	if len(name) > rules.MaxNameLen {
		cut := rules.MaxNameLen
		for cut > 0 && !utf8.RuneStart(name[cut]) {
			cut--
		}
		b.WriteString(strconv.Quote(name[:cut]))
		b.WriteString("… (")
		b.WriteString(strconv.Itoa(len(name)))
		b.WriteString(" bytes; a rule name has at most ")
		b.WriteString(strconv.Itoa(rules.MaxNameLen))
		b.WriteString(")")
	} else {
		b.WriteString(strconv.Quote(name))
	}
	const few = 5
	var names []*rules.Rule
	if set != nil {
		names = set.Rules
	}
	switch {
	case len(names) == 0:
		b.WriteString("; no rules are configured")
		return b.String()
	case len(names) == 1:
		b.WriteString("; the rule is ")
	default:
		b.WriteString("; rules are ")
	}
	for i, r := range names {
		if i == few {
			b.WriteString(", … (")
			b.WriteString(strconv.Itoa(len(names)))
			b.WriteString(" in all: GET /v1/rules)")
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(r.Name))
	}
	return b.String()
}
