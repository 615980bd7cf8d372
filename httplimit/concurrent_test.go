package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
)

// TestSeveralRulesConcurrently: 200 requests at once from one address and
// one API key, under per-IP 50/min and per-key 30/min. Exactly 30 pass, and
// the 170 the key's rule denies consume nothing of the IP's allowance.
func TestSeveralRulesConcurrently(t *testing.T) {
	limiter := oneStore(t)
	perIP := limiter(sluice.FixedWindow, sluice.PerMinute(50))
	perKey := limiter(sluice.SlidingWindowLog, sluice.PerMinute(30))
	var hits atomic.Int64
	h := httplimit.Middleware(httplimit.Options{Limiter: perIP, Name: "ip",
		Rules: []httplimit.Rule{{Name: "key", Limiter: perKey, KeyFunc: httplimit.KeyByHeader("X-Api-Key")}},
	})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	var wg sync.WaitGroup
	var ok, limited, other atomic.Int64
	for range 200 {
		wg.Go(func() {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = "192.0.2.1:1234"
			r.Header.Set("X-Api-Key", "k1")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			switch {
			case w.Code == 200 && w.Header().Get("RateLimit-Policy") == `"key";q=30;w=60`:
				ok.Add(1)
			case w.Code == 429 && w.Header().Get("Retry-After") != "":
				limited.Add(1)
			default:
				other.Add(1)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 30 || limited.Load() != 170 || other.Load() != 0 || hits.Load() != 30 {
		t.Errorf("200 requests at once: %d allowed with the key's headers, %d limited, %d other; handler ran %d times; want 30, 170, 0, 30",
			ok.Load(), limited.Load(), other.Load(), hits.Load())
	}
	if d, err := perIP.Allow(context.Background(), "ip:192.0.2.1"); err != nil || d.Remaining != 19 {
		t.Errorf("the IP's count after: %+v, %v; want 19 left (30 counted, then this one)", d, err)
	}
}
