package engine

import (
	"net/http"

	"github.com/sluicehq/sluice/httplimit"
)

// SetHeaders sets the rate-limit headers of res (the tightest enforcing
// rule's figures) on h; it sets nothing when no enforcing rule applied or
// the store failed.
func (res *Result) SetHeaders(h http.Header) {
	if res.Rule == nil || res.StoreErr != nil {
		return
	}
	httplimit.SetHeaders(h, res.Decision, res.Rule.Name, res.Rule.Limit)
}

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
