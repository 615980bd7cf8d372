package deferq

import (
	"bytes"
	"context"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/redistest"
)

// heads sets up n keys, each with two requests queued: the first held by
// consumer "a", silent for an hour (so any instance may claim it), of
// body size headSize, and the second held by a worker "s" of q (its
// entries, counted as held, are returned) of body size tailSize.
func heads(t *testing.T, room int64, n, headSize, tailSize int) (*worker, rueidis.Client, []*entry, []string) {
	t.Helper()
	return headsAt(t, redistest.StartServer(t), room, n, headSize, tailSize)
}

// headsAt is heads on srv.
func headsAt(t *testing.T, srv *redistest.Server, room int64, n, headSize, tailSize int) (*worker, rueidis.Client, []*entry, []string) {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	q, err := New(Options{Client: c, Upstream: &url.URL{Scheme: "http", Host: "upstream.test"}, MaxHeldBytes: room, EnqueueTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	rule := Rule{Name: "big", MaxBodyBytes: 512 << 10}
	q.SetRules([]Rule{rule})
	ctx := context.Background()
	w := newWorker(q, &rule, "s")
	stream := w.base + "q"
	if err := c.Do(ctx, c.B().XgroupCreate().Key(stream).Group(group).Id("0").Mkstream().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	enq := func(key string, size int) string {
		body := bytes.Repeat([]byte{'x'}, size)
		r := httptest.NewRequest("POST", "/"+key, bytes.NewReader(body))
		id, err := q.Enqueue(ctx, "big", []string{key}, r, r.Header, body)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	read := func(consumer string) []rueidis.XRangeEntry {
		m, err := c.Do(ctx, c.B().Xreadgroup().Group(group, consumer).Count(int64(n)).Streams().Key(stream).Id(">").Build()).AsXRead()
		if err != nil || len(m[stream]) != n {
			t.Fatalf("XREADGROUP %s: %d entries, %v; want %d", consumer, len(m[stream]), err, n)
		}
		return m[stream]
	}
	for i := range n {
		enq("k"+strconv.Itoa(i), headSize)
	}
	var sids []string
	for _, x := range read("a") {
		sids = append(sids, x.ID)
		if err := c.Do(ctx, c.B().Xclaim().Key(stream).Group(group).Consumer("a").MinIdleTime("0").Id(x.ID).Idle(time.Hour.Milliseconds()).Justid().Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		enq("k"+strconv.Itoa(i), tailSize)
	}
	var es []*entry
	for _, x := range read("s") {
		f := x.FieldValues
		e := &entry{sid: x.ID, id: f["id"], key: f["key"], method: f["method"], uri: f["uri"], header: f["header"], body: f["body"]}
		w.hold(e, 1)
		es = append(es, e)
	}
	return w, c, es, sids
}

// A held request waiting for its key's older one, which a silent instance
// holds, claims that one, letting go of itself in the same script when
// there is no room for both: its place goes to the one it claimed. It
// used to count both as held until its turn ended: here 600 KiB, over a
// bound of 500 KiB, for a moment.
func TestClaimHeadTakesThePlaceOfWhatItLetsGo(t *testing.T) {
	const room = 500 << 10
	w, _, es, sids := heads(t, room, 1, 300<<10, 300<<10)
	ctx := context.Background()
	done := make(chan result, 1)
	go func() { done <- w.claimHead(ctx, es[0], sids[0]) }()
	var got []*entry
	select {
	case got = <-w.in:
	case r := <-done:
		t.Fatalf("claimHead = %+v before it handed over the request it claimed", r)
	}
	if len(got) != 1 || got[0].sid != sids[0] {
		t.Fatalf("claimHead handed over %d entries, want the key's first, %s", len(got), sids[0])
	}
	if held, bytes := w.held.Load(), w.heldBytes.Load(); held > 1 || bytes > room {
		t.Errorf("with the claimed request handed over: %d held, %d KiB, over the bound (%d KiB: one of these)", held, bytes>>10, room>>10)
	}
	if r := <-done; !r.drop {
		t.Errorf("claimHead = %+v, want the waiting request let go (drop)", r)
	}
}

// Turns claiming their key's older request at once (up to Concurrency of
// them) each looked at what was held before the others' claims counted:
// all claimed, here 16 of 300 KiB with room for one.
func TestClaimHeadsAtOnceStayWithinBound(t *testing.T) {
	const n, size = 16, 300 << 10
	tail := int64(0)
	w, c, es, sids := heads(t, 1, n, size, 1)
	for _, e := range es {
		tail += e.size()
	}
	room := tail + w.rule.Load().MaxBody() + MaxHeadBytes // the tails, and one more at its largest
	w.q.o.MaxHeldBytes = room
	ctx := context.Background()
	var wg sync.WaitGroup
	results := make(chan result, n)
	for i := range n {
		wg.Go(func() { results <- w.claimHead(ctx, es[i], sids[i]) })
	}
	claimed := 0
	var dropped []*entry
	go func() { wg.Wait(); close(results) }()
	for {
		select {
		case b := <-w.in:
			claimed += len(b)
			continue
		case r, ok := <-results:
			if !ok {
				break
			}
			if r.drop {
				w.hold(r.e, -1) // as dispatch does
				dropped = append(dropped, r.e)
			}
			continue
		}
		break
	}
	if bytes := w.heldBytes.Load(); bytes > room {
		t.Errorf("%d turns claimed their key's head at once: %d claimed, %d KiB held, over the bound (%d KiB)", n, claimed, bytes>>10, room>>10)
	}
	if claimed < 1 {
		t.Errorf("no turn claimed its key's head: the bound had room for one")
	}
	// Those that could not claim theirs were let go, for a claim round
	// (idle for ClaimIdle at once), not dropped still held.
	for _, e := range dropped {
		p, err := c.Do(context.Background(), c.B().Xpending().Key(w.base+"q").Group(group).Idle(w.q.o.ClaimIdle.Milliseconds()).Start(e.sid).End(e.sid).Count(1).Build()).ToArray()
		if err != nil || len(p) != 1 {
			t.Errorf("%s, dropped by its turn: XPENDING IDLE %v = %d entries, %v; want it let go (pending, idle for ClaimIdle)", e.sid, w.q.o.ClaimIdle, len(p), err)
		}
	}
}
