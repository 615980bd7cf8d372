package proxy_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/proxy"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/rules"
)

// The one bound on a request body through the proxy: a request a defer
// rule would queue is read whole, up to the rule's defer.max_body_bytes.
// On every engine, exactly: a body of the bound is queued (202), one byte
// more answers 413 naming the bound, announced by Content-Length or
// chunked (no length: read to the bound plus one).
func TestEngineDeferBodyBound(t *testing.T) {
	srv := redistest.StartServer(t)
	const max = 10
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		q, err := deferq.New(deferq.Options{Client: c, Prefix: strings.NewReplacer(" ", "", "(", "", ")", "", ",", "", "/", "").Replace(ec.name)})
		if err != nil {
			t.Fatal(err)
		}
		q.SetRules([]deferq.Rule{{Name: "jobs", MaxBodyBytes: max}})
		up := newRecorder(t, nil)
		s := startOn(t, ec, up.srv.URL, engineOpts{specs: []rules.Spec{{Name: "jobs", Rate: "1/m", Action: "defer"}},
			proxy: proxy.Options{Defer: q}})
		if resp, body := s.do(t, request(t, s, "POST", "/job", "first")); resp.StatusCode != 200 {
			t.Fatalf("first request: %d %s, want 200 (under the limit)", resp.StatusCode, body)
		}
		for _, chunked := range []bool{false, true} {
			for _, c := range []struct {
				n      int
				status int
			}{{max, http.StatusAccepted}, {max + 1, http.StatusRequestEntityTooLarge}} {
				req := request(t, s, "POST", "/job", "")
				req.Body = io.NopCloser(strings.NewReader(strings.Repeat("x", c.n)))
				if !chunked {
					req.ContentLength = int64(c.n)
				}
				resp, body := s.do(t, req)
				if resp.StatusCode != c.status || c.status == 413 && !strings.Contains(body, "defer.max_body_bytes is 10") {
					t.Errorf("chunked %v, a body of %d bytes over the limit: %d %s, want %d", chunked, c.n, resp.StatusCode, body, c.status)
				}
			}
		}
		if n := up.count(); n != 1 {
			t.Errorf("the upstream got %d requests, want 1 (the rest deferred or refused)", n)
		}
	})
}
