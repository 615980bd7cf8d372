package server_test

import (
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/internal/rules"
)

// TestRemainingAtMostLimitWithBurst: a rule whose burst exceeds its rate
// answers remaining ≤ limit, in /v1/check's JSON and in the headers of
// /v1/forward-auth, as the library's middleware does.
func TestRemainingAtMostLimitWithBurst(t *testing.T) {
	h := memHandler(t, "burst.yaml", rules.Spec{Name: "bursty", Key: []string{"header:X-Api-Key"}, Rate: "10/m", Burst: 20, Algorithm: "token_bucket"})
	srv := httptest.NewServer(h)
	defer srv.Close()
	f := &fixture{srv: srv}
	for i := range 3 {
		status, cr := check(t, f, `{"rule":"bursty","key":"k1"}`)
		if status != 200 || !cr.Allowed || cr.Limit != 10 || cr.Remaining != 10 {
			t.Errorf("check %d: %d %+v, want allowed, limit 10, remaining 10 (19-%d capped)", i, status, cr, i)
		}
	}
	resp, _ := do(t, "GET", srv.URL+"/v1/forward-auth", "", map[string]string{"X-Api-Key": "k2", "X-Forwarded-Uri": "/"})
	if l, r := resp.Header.Get("X-RateLimit-Limit"), resp.Header.Get("X-RateLimit-Remaining"); l != "10" || r != "10" {
		t.Errorf("forward-auth: limit %s remaining %s, want 10 and 10", l, r)
	}
	if n, _ := strconv.Atoi(resp.Header.Get("X-RateLimit-Remaining")); n > 10 {
		t.Errorf("remaining %d > limit", n)
	}
}
