package deferq_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/deferq"
)

// On a Redis Cluster the queue's scripts run on the node of the rule's
// hash tag, the records of other requests of the rule included (begin.lua
// reads the record of its key's head, a key of the same tag): requests are
// delivered in order per key, and a head whose request is gone is passed.
func TestOrderOnCluster(t *testing.T) {
	c := clusterClient(t)
	up := newUpstream(t, nil)
	q, err := newQueue(deferq.Options{Client: c, Consumer: "a", Upstream: mustURL(t, up.srv.URL),
		ClaimIdle: time.Hour, DeliveryTimeout: 10 * time.Minute}) // one instance: no claims; no send cut off and sent again, out of order
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs", Take: admitAll}})
	gone := enqueue(t, q, "jobs", "k", http.MethodPost, "/gone", []byte("0"))
	for _, p := range []string{"/1", "/2", "/3"} {
		enqueue(t, q, "jobs", "k", http.MethodPost, p, []byte(p))
	}
	base := "sluice:defer:{" + deferq.Tag("jobs") + "}:"
	if err := c.Do(context.Background(), c.B().Xdel().Key(base+"q").Id(sidOf(t, c, base, gone)).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	start(t, q)
	for _, want := range []string{"/1", "/2", "/3"} {
		select {
		case d := <-up.arrivals:
			if d.path != want {
				t.Fatalf("delivered %s, want %s (in order)", d.path, want)
			}
		case <-time.After(30 * time.Second): // a bound: each comes within a second
			t.Fatalf("%s never delivered", want)
		}
	}
}
