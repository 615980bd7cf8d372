package deferq_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"testing"
	"time"

	"github.com/redis/rueidis"
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

// On a Redis Cluster too, the instances' scan indexes a request an
// earlier version queued and names its key's list in its record: scan.lua
// and listed.lua touch only keys of the rule's hash tag, records included.
func TestOldRequestIndexedOnCluster(t *testing.T) {
	c := clusterClient(t)
	oldRequestIndexed(t, c, c)
}

// oldRequestIndexed queues a request of rule jobs as an earlier version
// did, held by one of its instances, through admin; starts an instance of
// this version on c; and waits until the scan has indexed the request,
// named its key's list in its record, and ended.
func oldRequestIndexed(t *testing.T, admin, c rueidis.Client) {
	t.Helper()
	ctx := context.Background()
	base := "sluice:defer:{" + deferq.Tag("jobs") + "}:"
	id := deferq.Tag("jobs") + "-00000000000000000001"
	sid := writeRequest(t, admin, base, id, "a", false)
	for _, cmd := range []rueidis.Completed{
		admin.B().XgroupCreate().Key(base + "q").Group("sluice").Id("0").Build(),
		admin.B().Xreadgroup().Group("sluice", "old").Count(10).Streams().Key(base + "q").Id(">").Build(),
	} {
		if err := admin.Do(ctx, cmd).Error(); err != nil {
			t.Fatal(err)
		}
	}
	q, err := newQueue(deferq.Options{Client: c, Consumer: "new", Upstream: mustURL(t, newUpstream(t, nil).srv.URL), ClaimIdle: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs", Take: admitAll}})
	start(t, q)
	h := sha256.Sum256([]byte("a"))
	waitFor(t, "the request indexed, its list named, the scan over", time.Minute, func() bool {
		i, _ := admin.Do(ctx, admin.B().Hget().Key(base+"i").Field(sid).Build()).ToString()
		l, _ := admin.Do(ctx, admin.B().Hget().Key(base+"s:"+id).Field("list").Build()).ToString()
		st, _ := admin.Do(ctx, admin.B().Get().Key(base+"scan").Build()).ToString()
		return i == id && l == hex.EncodeToString(h[:10]) && st == "done"
	})
}
