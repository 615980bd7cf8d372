package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
)

// Two middlewares stacked (a global limit around a route's): the answer
// carries the tighter limit's headers, as one middleware with two rules
// gives, not whichever ran last. The inner one, admitting, leaves the
// outer one's headers when they are tighter; denying, it sends its own.
func TestStackedMiddlewaresSendTheTighterHeaders(t *testing.T) {
	limiter := oneStore(t)
	global := limiter(sluice.FixedWindow, sluice.PerMinute(3))
	route := limiter(sluice.FixedWindow, sluice.PerHour(100))
	tight := limiter(sluice.FixedWindow, sluice.PerMinute(1))
	everyone := func(*http.Request) (string, bool) { return "all", true }
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	outer := httplimit.Middleware(httplimit.Options{Limiter: global, Name: "global", KeyFunc: everyone})
	loose := outer(httplimit.Middleware(httplimit.Options{Limiter: route, Name: "route", KeyFunc: everyone})(ok))
	strict := outer(httplimit.Middleware(httplimit.Options{Limiter: tight, Name: "strict", KeyFunc: everyone})(ok))
	do := func(h http.Handler) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		return w
	}
	for i, want := range []struct {
		h                          http.Handler
		status                     int
		policy, remaining, limited string
	}{
		// global 2 left, route 99: global is the tighter.
		{loose, 200, `"global";q=3;w=60`, "2", `"global";r=2;t=60`},
		// global 1 left, strict 0: strict is.
		{strict, 200, `"strict";q=1;w=60`, "0", `"strict";r=0;t=60`},
		// global 0, strict denies: its 429 says why.
		{strict, 429, `"strict";q=1;w=60`, "0", `"strict";r=0;t=60`},
	} {
		w := do(want.h)
		h := w.Header()
		if w.Code != want.status || h.Get("RateLimit-Policy") != want.policy || h.Get("X-RateLimit-Remaining") != want.remaining || h.Get("RateLimit") != want.limited {
			t.Errorf("request %d: %d %s remaining %s %s; want %d %s remaining %s %s", i, w.Code,
				h.Get("RateLimit-Policy"), h.Get("X-RateLimit-Remaining"), h.Get("RateLimit"),
				want.status, want.policy, want.remaining, want.limited)
		}
	}
	// The same remaining: the longer reset is the tighter, as among one
	// middleware's rules.
	hourly := limiter(sluice.FixedWindow, sluice.PerHour(5))
	minutely := limiter(sluice.FixedWindow, sluice.PerMinute(5))
	for _, tc := range []struct{ outer, inner *sluice.Limiter }{{hourly, minutely}, {minutely, hourly}} {
		h := httplimit.Middleware(httplimit.Options{Limiter: tc.outer, Name: "outer", KeyFunc: everyone})(
			httplimit.Middleware(httplimit.Options{Limiter: tc.inner, Name: "inner", KeyFunc: everyone})(ok))
		w := do(h)
		if got := w.Header().Get("X-RateLimit-Reset"); w.Code != 200 || got != "3600" {
			t.Errorf("%s outside, %s inside: %d, X-RateLimit-Reset %s; want 200, the hourly limit's 3600", tc.outer.Limit(), tc.inner.Limit(), w.Code, got)
		}
	}
}
