package deferq_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A dead instance's request is claimed however many requests live
// instances hold before it in the group's pending list. XAUTOCLAIM looks
// at no more than ten times its COUNT pending entries per call, and each
// round of claims made at most 10 calls from the start of the list: past
// the first 10,000 pending entries (eleven live instances holding 1,000
// each), a dead instance's requests were never looked at while the others
// stayed held, and waited far past the minute.
func TestClaimReachesPastLiveEntries(t *testing.T) {
	srv := redistest.StartServer(t)
	c := client(t, srv.Addr)
	up := newUpstream(t, nil)
	ctx := context.Background()
	base := "sluice:defer:{" + deferq.Tag("jobs") + "}:"
	if err := c.Do(ctx, c.B().XgroupCreate().Key(base+"q").Group("sluice").Id("0").Mkstream().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	// 10,100 entries held by live instances ("alive"), kept claimed as
	// live instances keep theirs.
	const held = 10_100
	cmds := make(rueidis.Commands, 0, held)
	for i := range held {
		cmds = append(cmds, c.B().Xadd().Key(base+"q").Id("*").FieldValue().FieldValue("filler", strconv.Itoa(i)).Build())
	}
	var ids []string
	for _, r := range c.DoMulti(ctx, cmds...) {
		id, err := r.ToString()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := c.Do(ctx, c.B().Xreadgroup().Group("sluice", "alive").Count(held).Streams().Key(base+"q").Id(">").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	keep, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for keep.Err() == nil {
			for i := 0; i < len(ids); i += 1000 {
				c.Do(keep, c.B().Xclaim().Key(base+"q").Group("sluice").Consumer("alive").MinIdleTime("0").Id(ids[i:min(i+1000, len(ids))]...).Justid().Build())
			}
			select {
			case <-keep.Done():
			case <-time.After(100 * time.Millisecond): // a live instance's heartbeat, 600 times as often as claim_idle
			}
		}
	}()
	t.Cleanup(func() { stop(); <-done })

	q, err := newQueue(deferq.Options{Client: c, Consumer: "a", Upstream: mustURL(t, up.srv.URL),
		// claim_idle a minute: the heartbeat above would have to stall
		// that long for the live entries to go idle (at 4s, a loaded
		// machine's stall could). The dead instance's request, idle an
		// hour, is claimable all the same, from the first round (at once;
		// then every 5s).
		ClaimIdle: time.Minute, DeliveryTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs", Take: admitAll, MaxQueue: 2 * held}})
	id := enqueue(t, q, "jobs", "k", http.MethodPost, "/orphan", []byte("x"))
	// A dead instance read it, long ago.
	if err := c.Do(ctx, c.B().Xreadgroup().Group("sluice", "dead").Count(1).Streams().Key(base+"q").Id(">").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	sid := sidOf(t, c, base, id)
	if err := c.Do(ctx, c.B().Xclaim().Key(base+"q").Group("sluice").Consumer("dead").MinIdleTime("0").Id(sid).Idle(time.Hour.Milliseconds()).Justid().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	start(t, q)
	select {
	case d := <-up.arrivals:
		if d.path != "/orphan" {
			t.Errorf("delivered %s, want /orphan", d.path)
		}
	case <-time.After(30 * time.Second): // a hang detector: it comes in the first round, at once, or one of the next 5s apart
		t.Fatalf("the dead instance's request, behind %d held by live instances, was not claimed", held)
	}
	// What the test is about: the live instances' entries stayed theirs.
	// Had the heartbeat above stalled past claim_idle, a would have
	// claimed them too (and dead-lettered them, not being requests),
	// reaching the dead instance's request without scanning past them.
	if n := pendingWith(t, c, "jobs", "alive"); n != held {
		t.Errorf("the live instances hold %d entries, want %d: their heartbeat stalled past claim_idle and the scan was not tested", n, held)
	}
}
