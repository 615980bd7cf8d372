package httplimit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// Two requests a minute per client IP; the third gets 429.
func ExampleMiddleware() {
	// A fixed clock makes the output reproducible; leave WithClock out in
	// real code.
	now := time.Date(2026, 1, 1, 12, 0, 30, 0, time.UTC)
	limiter, err := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.FixedWindow, sluice.PerMinute(2),
		sluice.WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello\n")
	})
	h := httplimit.Middleware(httplimit.Options{Limiter: limiter, Name: "per-ip"})(hello)

	for range 3 {
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = "192.0.2.7:51000"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header().Get("X-RateLimit-Remaining"), rec.Header().Get("RateLimit"))
		fmt.Print(rec.Body.String())
	}
	// Output:
	// 200 1 "per-ip";r=1;t=30
	// hello
	// 200 0 "per-ip";r=0;t=30
	// hello
	// 429 0 "per-ip";r=0;t=30
	// {"error":"rate_limited","rule":"per-ip","retry_after_ms":30000}
}

func ExampleSetHeaders() {
	h := http.Header{}
	d := sluice.Decision{Allowed: true, Limit: 100, Remaining: 41, ResetAfter: 36200 * time.Millisecond}
	httplimit.SetHeaders(h, d, "api", sluice.PerMinute(100))
	for _, k := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit"} {
		fmt.Printf("%s: %s\n", k, h.Get(k))
	}
	// Output:
	// X-RateLimit-Limit: 100
	// X-RateLimit-Remaining: 41
	// X-RateLimit-Reset: 37
	// RateLimit-Policy: "api";q=100;w=60
	// RateLimit: "api";r=41;t=37
}
