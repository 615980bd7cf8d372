package httplimit_test

import (
	"net/http"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// TestKeyByHeaderHost: a limit per virtual host. net/http moves the Host
// header out of r.Header into r.Host, so reading r.Header["Host"] finds
// nothing and every request would pass uncounted.
func TestKeyByHeaderHost(t *testing.T) {
	lim := mustLimiter(t, memstore.New(memstore.Options{}), sluice.FixedWindow, sluice.PerMinute(1))
	srv, hits := server(t, httplimit.Options{Limiter: lim, Name: "per-host", KeyFunc: httplimit.KeyByHeader("host")})
	for i, want := range []struct {
		host   string
		status int
	}{{"a.example", 200}, {"a.example", 429}, {"b.example", 200}, {"b.example", 429}} {
		req, err := http.NewRequest("GET", srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = want.host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want.status || resp.Header.Get("X-RateLimit-Limit") != "1" {
			t.Errorf("request %d (Host %s): status %d, X-RateLimit-Limit %q; want %d, \"1\"", i, want.host, resp.StatusCode, resp.Header.Get("X-RateLimit-Limit"), want.status)
		}
	}
	if hits.Load() != 2 {
		t.Errorf("next handler reached %d times, want 2 (one per host)", hits.Load())
	}
}
