package deferq_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// The pass over the rule's records (records.lua) runs with no more than
// Commands allows (SCAN among them), and on a Redis Cluster, where the
// script meets only keys of the rule's hash tag: a request an earlier
// version queued and trimmed away before any instance of this version
// started leaves no record once one has, without anyone asking.
func TestOldRequestTrimmedCleanedACLAndCluster(t *testing.T) {
	t.Run("acl", func(t *testing.T) {
		srv := redistest.StartServer(t)
		oldTrimmedCleaned(t, client(t, srv.Addr), restrictedClient(t, srv.Addr))
	})
	t.Run("cluster", func(t *testing.T) {
		c := clusterClient(t)
		oldTrimmedCleaned(t, c, c)
	})
}

// oldTrimmedCleaned queues a request of rule jobs as an earlier version
// did, through admin, trims it away, starts an instance of this version
// on c, and waits for its record to go.
func oldTrimmedCleaned(t *testing.T, admin, c rueidis.Client) {
	t.Helper()
	ctx := context.Background()
	base := "sluice:defer:{" + deferq.Tag("jobs") + "}:"
	id := deferq.Tag("jobs") + "-00000000000000000001"
	writeRequest(t, admin, base, id, "a", false)
	for _, cmd := range []rueidis.Completed{
		admin.B().XgroupCreate().Key(base + "q").Group("sluice").Id("0").Build(),
		admin.B().Xtrim().Key(base + "q").Maxlen().Threshold("0").Build(),
	} {
		if err := admin.Do(ctx, cmd).Error(); err != nil {
			t.Fatal(err)
		}
	}
	q, err := newQueue(deferq.Options{Client: c, Consumer: "new", Upstream: mustURL(t, newUpstream(t, nil).srv.URL)})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs", Take: admitAll}})
	start(t, q)
	waitFor(t, "the record of the request trimmed away cleaned", time.Minute, func() bool {
		return exists(t, admin, base+"s:"+id) == 0
	})
	if n := exists(t, admin, base+"records"); n != 1 {
		t.Errorf("the pass's cursor: %d keys, want 1", n)
	}
	if pttl, err := admin.Do(ctx, admin.B().Pttl().Key(base+"records").Build()).AsInt64(); err != nil || pttl <= 0 {
		t.Errorf("PTTL of the pass's cursor: %d, %v; want an expiry", pttl, err)
	}
}
