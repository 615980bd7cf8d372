package engine

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/jsonstr"
	"github.com/sluicehq/sluice/internal/rules"
)

// SetHeaders sets the rate-limit headers of res (the tightest enforcing
// rule's figures) on h; it sets nothing when no enforcing rule applied or
// the store failed. A rule whose keys may be sharded (shards: N or auto)
// has a decision that is one shard's, its Remaining scaled up (unshard):
// the RateLimit field's t is then not derived from it as from one key's
// (httplimit.SetHeaders with no algorithm), but is the time until full.
func (res *Result) SetHeaders(h http.Header) {
	if !res.SetsHeaders() {
		return
	}
	alg := res.Rule.Algorithm
	if !res.Rule.Shards.IsZero() {
		alg = 0
	}
	httplimit.SetHeaders(h, res.Decision, res.Rule.Name, alg, res.Rule.Limit)
}

// SetsHeaders reports whether SetHeaders sets anything: an enforcing rule
// applied and the store decided.
func (res *Result) SetsHeaders() bool { return res.Rule != nil && res.StoreErr == nil }

// WriteDenied writes the answer for a request res did not allow: 503 with
// {"error":"store_unavailable"} when the store could not decide (on_error
// deny); otherwise the rate-limit headers and the limited answer
// ({"error":"rate_limited",…}, Retry-After) with status limitedStatus
// (429, or forward_auth.deny_status). This is the one place where a
// decision becomes an HTTP status.
func WriteDenied(w http.ResponseWriter, res *Result, limitedStatus int) {
	if res.StoreErr != nil || res.DeniedBy == nil {
		httplimit.WriteUnavailable(w)
		return
	}
	res.SetHeaders(w.Header())
	httplimit.WriteLimitedStatus(w, limitedStatus, res.DeniedBy.Name, res.Decision)
}

// WriteMatchError writes the answer for a request Match refused: for
// a *rules.AmbiguousKeyError (the only error Match returns), 400 with
// {"error":"ambiguous_key","rule":NAME,"part":PART,"message":…}.
func WriteMatchError(w http.ResponseWriter, err error) {
	b := make([]byte, 0, 256)
	var ae *rules.AmbiguousKeyError
	if errors.As(err, &ae) {
		b = append(b, `{"error":"ambiguous_key","rule":`...)
		b = jsonstr.Append(b, ae.Rule.Name)
		b = append(b, `,"part":`...)
		b = jsonstr.Append(b, ae.Part.String())
		b = append(b, `,"message":`...)
		msg := "the request sends " + ae.Part.String() + " under another spelling of its name; send it under its own name only"
		switch {
		case ae.TooMany && ae.Part.Kind == rules.PartMethod:
			msg = "the request names more than " + strconv.Itoa(rules.MaxKeysPerRule) +
				" methods, its own and its method overrides' (X-HTTP-Method-Override, X-HTTP-Method, X-Method-Override, _method); send one override"
		case ae.TooMany:
			msg = "the request sends " + ae.Part.String() + " with more than " + strconv.Itoa(rules.MaxKeysPerRule) + " different values; send fewer"
		}
		b = jsonstr.Append(b, msg)
	} else {
		b = append(b, `{"error":"bad_request","message":`...)
		b = jsonstr.Append(b, err.Error())
	}
	b = append(b, "}\n"...)
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Cache-Control"] = []string{"no-store"}
	w.WriteHeader(http.StatusBadRequest)
	w.Write(b)
}
