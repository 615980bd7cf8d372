package deferq_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A replayed request reaches the upstream without the client's hop-by-hop
// headers, as the live proxy forwards it: no Connection, no header that
// Connection names, no Keep-Alive or Proxy-Connection, and no upgrade to
// HTTP/2 (Upgrade: h2c, HTTP2-Settings), which an upstream that speaks
// h2c could act on. End-to-end headers (Authorization, the client's own)
// pass. HTTP2-Settings and the Connection-named header used to be
// replayed.
func TestReplayDropsHopHeaders(t *testing.T) {
	srv := redistest.StartServer(t)
	up := newUpstream(t, nil)
	q, err := newQueue(deferq.Options{Client: client(t, srv.Addr), Upstream: mustURL(t, up.srv.URL)})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs", Take: func(context.Context, []string) (sluice.Decision, error) {
		return sluice.Decision{Allowed: true}, nil
	}}})
	r := httptest.NewRequest(http.MethodPost, "/job", bytes.NewReader([]byte("job")))
	for k, v := range map[string]string{
		"Connection":       "Upgrade, HTTP2-Settings, X-Hop",
		"Upgrade":          "h2c",
		"Http2-Settings":   "AAMAAABkAARAAAAAAAIAAAAA",
		"X-Hop":            "for the next hop only",
		"Keep-Alive":       "timeout=5",
		"Proxy-Connection": "keep-alive",
		"Te":               "trailers",
		"Authorization":    "Bearer end-to-end",
		"X-Kept":           "yes",
	} {
		r.Header.Set(k, v)
	}
	id, err := q.Enqueue(context.Background(), "jobs", []string{"k"}, r, r.Header, []byte("job"))
	if err != nil {
		t.Fatal(err)
	}
	start(t, q)
	var d delivery
	select {
	case d = <-up.arrivals:
	case <-time.After(30 * time.Second): // a hang detector
		t.Fatalf("%s never replayed", id)
	}
	for _, k := range []string{"Connection", "Upgrade", "Http2-Settings", "X-Hop", "Keep-Alive", "Proxy-Connection", "Te"} {
		if v, ok := d.header[k]; ok {
			t.Errorf("replay of %s carried %s: %q; want it dropped (hop-by-hop)", id, k, v)
		}
	}
	if d.header.Get("Authorization") != "Bearer end-to-end" || d.header.Get("X-Kept") != "yes" || d.idem != id {
		t.Errorf("replay of %s: headers %v; want Authorization, X-Kept and Idempotency-Key passed on", id, d.header)
	}
}
