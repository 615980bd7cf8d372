package deferq

import (
	"context"
	"net/url"
	"testing"

	"github.com/redis/rueidis"
)

// A request queued with its hop-by-hop headers (by a version that stored
// them, such as HTTP2-Settings) is replayed without them: the replay drops
// what the enqueue now drops.
func TestReplayRequestDropsStoredHopHeaders(t *testing.T) {
	q, err := New(Options{Connect: func() rueidis.Client { return nil }, Upstream: &url.URL{Scheme: "http", Host: "upstream.test"}})
	if err != nil {
		t.Fatal(err)
	}
	w := newWorker(q, &Rule{Name: "jobs"}, q.o.Consumer)
	e := &entry{id: Tag("jobs") + "-00000000000000000000", method: "POST", uri: "/job", body: "job",
		header: `{"Connection":["HTTP2-Settings, X-Hop"],"Upgrade":["h2c"],"Http2-Settings":["AAMAAABkAARAAAAAAAIAAAAA"],` +
			`"X-Hop":["next hop"],"Keep-Alive":["timeout=5"],"X-Kept":["yes"]}`}
	req, err := w.request(context.Background(), e)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"Connection", "Upgrade", "Http2-Settings", "X-Hop", "Keep-Alive"} {
		if v, ok := req.Header[k]; ok {
			t.Errorf("request(%s) header %s = %q; want it dropped (hop-by-hop)", e.header, k, v)
		}
	}
	if req.Header.Get("X-Kept") != "yes" {
		t.Errorf("request(%s): headers %v; want X-Kept passed on", e.header, req.Header)
	}
}
