package deferq_test

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A reload that lowers a rule's max_body_bytes below requests already
// queued: those requests are dead-lettered, with an error naming the
// bound, as their turn (held from before) or their read comes. A read
// used to take as many entries as the new, small bound left room for (up
// to 100 at once), whatever their size, and they were then replayed with
// bodies the rule no longer accepts. Their keys go on: a request queued
// after, under the same key, is delivered.
func TestLoweredBodyBoundDeadLetters(t *testing.T) {
	g := newGated(t, 6<<20)
	q, c, up, take := g.q, g.c, g.up, g.take
	const n = 12
	var ids []string
	for i := range n {
		ids = append(ids, enqueue(t, q, "big", "k"+strconv.Itoa(i%3), http.MethodPost, "/big/"+strconv.Itoa(i), bytes.Repeat([]byte{byte(i)}, 400<<10)))
	}
	start(t, q)
	ctx := context.Background()
	// 6 MiB of room at 512 KiB + MaxHeadBytes each: 4, then 2 more once the 4 are held at their size; the rest stay in Redis.
	waitFor(t, "the instance to read 4 or more (6 MiB of room at 512 KiB + MaxHeadBytes each)", 30*time.Second, func() bool { return pending(c, "big") >= 4 })
	// The reload: 1 KiB from now on.
	q.SetRules([]deferq.Rule{{Name: "big", MaxBodyBytes: 1 << 10, Take: take}})
	deadLettered := func() int {
		k := 0
		for _, id := range ids {
			if st, err := q.Status(ctx, id); err == nil && st.State == "dead_lettered" {
				k++
			}
		}
		return k
	}
	waitFor(t, "every request over the new bound dead-lettered", time.Minute, func() bool { return deadLettered() == n })
	for _, id := range ids {
		st, err := q.Status(ctx, id)
		if err != nil || st.State != "dead_lettered" || !strings.Contains(st.Error, "max_body_bytes") || st.Attempts != 0 {
			t.Errorf("Status(%s) = %+v, %v; want dead_lettered with an error naming max_body_bytes, no attempt", id, st, err)
		}
	}
	dead, err := c.Do(ctx, c.B().Xrange().Key(deferq.DefaultPrefix+"{"+deferq.Tag("big")+"}:dead").Start("-").End("+").Build()).AsXRange()
	if err != nil || len(dead) != n {
		t.Fatalf("dead letters: %d, %v; want %d", len(dead), err, n)
	}
	for _, e := range dead {
		if len(e.FieldValues["body"]) != 400<<10 || !strings.Contains(e.FieldValues["error"], "max_body_bytes") {
			t.Errorf("dead letter of %d bytes, error %q; want the whole request and the reason", len(e.FieldValues["body"]), e.FieldValues["error"])
		}
	}
	g.open.Store(true)
	small := enqueue(t, q, "big", "k0", http.MethodPost, "/small", []byte("s"))
	awaitState(t, q, small, "delivered")
	if got, _ := up.snapshot(); len(got) != 1 || got[0].path != "/small" {
		t.Errorf("deliveries %d (first %v); want only /small: nothing over the bound is replayed", len(got), got)
	}
}

// An instance never reads from Redis a request whose body is over the
// rule's bound in force: with the bound lowered to 1 KiB over 8 queued
// requests of 400 KiB, Redis sends it a few KiB, not 3.2 MB. A read used
// to take up to 100 entries at once whatever their size: 100 × 64 MiB at
// the largest bound, past MaxHeldBytes.
func TestLoweredBodyBoundReadBounded(t *testing.T) {
	srv := redistest.StartServer(t)
	up := newUpstream(t, nil)
	c := client(t, srv.Addr)
	q, err := newQueue(deferq.Options{Client: c, Upstream: mustURL(t, up.srv.URL), MaxHeldBytes: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	closed := func(context.Context, []string) (sluice.Decision, error) {
		return sluice.Decision{RetryAfter: 50 * time.Millisecond}, nil
	}
	q.SetRules([]deferq.Rule{{Name: "big", MaxBodyBytes: 512 << 10, Take: closed}})
	const n = 8
	for i := range n {
		enqueue(t, q, "big", "k"+strconv.Itoa(i), http.MethodPost, "/big/"+strconv.Itoa(i), bytes.Repeat([]byte{byte(i)}, 400<<10))
	}
	q.SetRules([]deferq.Rule{{Name: "big", MaxBodyBytes: 1 << 10, Take: closed}}) // lowered before the instance reads
	ctx := context.Background()
	sent := func() int64 { // bytes Redis has sent its clients
		info, err := c.Do(ctx, c.B().Info().Section("stats").Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		_, v, _ := strings.Cut(info, "total_net_output_bytes:")
		v, _, _ = strings.Cut(v, "\r")
		k, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			t.Fatalf("INFO stats total_net_output_bytes %q: %v", v, err)
		}
		return k
	}
	dead := deferq.DefaultPrefix + "{" + deferq.Tag("big") + "}:dead"
	base := sent()
	start(t, q)
	waitFor(t, "the requests dead-lettered (or read whole)", 30*time.Second, func() bool {
		k, _ := c.Do(ctx, c.B().Xlen().Key(dead).Build()).AsInt64()
		return k == n || sent()-base > 1<<20
	})
	if got := sent() - base; got > 1<<20 {
		t.Errorf("Redis sent %d bytes once the instance ran; want under 1 MiB (%d requests of 400 KiB over the 1 KiB bound: none read whole)", got, n)
	}
	if got, _ := up.snapshot(); len(got) != 0 {
		t.Errorf("%d deliveries, want none", len(got))
	}
}
