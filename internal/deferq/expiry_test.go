package deferq_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// Every key the queue leaves behind expires, but those that hold what may
// still be sent or its order (the stream, the dead-letter stream, the
// stream-id index, a key's list): after earlier-version requests, one
// trimmed before the scan reached it, are indexed, delivered or cleaned
// by the scan and the pass over the records, after this version's are
// delivered, and though the scan's state and the pass's cursor were
// found with no expiry (written by hand, or by a build that set none),
// the records, the scan's state and the pass's cursor have one.
func TestDeferKeysExpire(t *testing.T) {
	srv := redistest.StartServer(t)
	c := client(t, srv.Addr)
	ctx := context.Background()
	base := "sluice:defer:{" + deferq.Tag("jobs") + "}:"
	old := func(n string) string { return deferq.Tag("jobs") + "-0000000000000000000" + n }
	sid1 := writeRequest(t, c, base, old("1"), "a", false)
	writeRequest(t, c, base, old("2"), "b", false)
	sid3 := writeRequest(t, c, base, old("3"), "c", true)
	for _, cmd := range []rueidis.Completed{
		c.B().XgroupCreate().Key(base + "q").Group("sluice").Id("0").Build(),
		c.B().Xdel().Key(base + "q").Id(sid3).Build(),
		c.B().Set().Key(base + "records").Value("0").Build(),
		c.B().Set().Key(base + "scan").Value(sid1).Build(), // a scan with no end looked at the first

	} {
		if err := c.Do(ctx, cmd).Error(); err != nil {
			t.Fatal(err)
		}
	}
	up := newUpstream(t, nil)
	q, err := newQueue(deferq.Options{Client: c, Upstream: mustURL(t, up.srv.URL), ClaimIdle: 2 * time.Second, DeliveryTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs", Take: admitAll}})
	start(t, q)
	enqueue(t, q, "jobs", "d", http.MethodPost, "/job", []byte("d"))
	enqueue(t, q, "jobs", "e", http.MethodPost, "/job", []byte("e"))
	waitFor(t, "4 requests delivered, the scan over, the trimmed one's record cleaned", time.Minute, func() bool {
		up.mu.Lock()
		n := len(up.got)
		up.mu.Unlock()
		st, _ := c.Do(ctx, c.B().Get().Key(base+"scan").Build()).ToString()
		return n == 4 && st == "done" && exists(t, c, base+"s:"+old("3")) == 0
	})
	keep := map[string]bool{base + "q": true, base + "dead": true, base + "i": true}
	var cursor uint64
	seen := map[string]bool{}
	for {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match("sluice:*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range e.Elements {
			seen[k] = true
			if keep[k] || strings.HasPrefix(k, base+"k:") {
				continue
			}
			if pttl, err := c.Do(ctx, c.B().Pttl().Key(k).Build()).AsInt64(); err != nil || pttl == -1 {
				t.Errorf("key %s: PTTL %d (%v), want an expiry", k, pttl, err)
			}
		}
		if cursor = e.Cursor; cursor == 0 {
			break
		}
	}
	for _, k := range []string{base + "records", base + "scan"} {
		if !seen[k] {
			t.Errorf("key %s missing", k)
		}
	}
}
