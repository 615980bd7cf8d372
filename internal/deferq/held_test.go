package deferq_test

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// An instance holds at most MaxHeldBytes of a rule's requests in memory:
// with bodies of up to 512 KiB and 2 MiB to hold, it reads 4 of the 12
// queued (its first read took 100 before, 1.2 GB for a rule at 1000 held
// entries of the default 1 MiB bodies); the rest wait in Redis and are
// all delivered, each once, when the rule lets them go.
func TestHeldBytesBounded(t *testing.T) {
	srv := redistest.StartServer(t)
	up := newUpstream(t, nil)
	c := client(t, srv.Addr)
	q, err := deferq.New(deferq.Options{Client: c, Upstream: mustURL(t, up.srv.URL), MaxHeldBytes: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var open atomic.Bool
	take := func(context.Context, []string) (sluice.Decision, error) {
		if open.Load() {
			return sluice.Decision{Allowed: true}, nil
		}
		return sluice.Decision{RetryAfter: 50 * time.Millisecond}, nil
	}
	q.SetRules([]deferq.Rule{{Name: "big", MaxBodyBytes: 512 << 10, Take: take}})
	const n = 12
	for i := range n {
		enqueue(t, q, "big", "k"+strconv.Itoa(i), http.MethodPost, "/big/"+strconv.Itoa(i), bytes.Repeat([]byte{byte(i)}, 400<<10))
	}
	start(t, q)
	stream := deferq.DefaultPrefix + "{" + deferq.Tag("big") + "}:q"
	pending := func() int {
		// The summary's first element: the entries read and not settled.
		v, err := c.Do(context.Background(), c.B().Xpending().Key(stream).Group("sluice").Build()).ToArray()
		if err != nil || len(v) == 0 {
			return -1
		}
		k, _ := v[0].AsInt64()
		return int(k)
	}
	waitFor(t, "the instance to read from the queue", 30*time.Second, func() bool { return pending() > 0 })
	// One read took what there was room for, at once: 2 MiB / 512 KiB.
	if got := pending(); got != 4 {
		t.Fatalf("the instance holds %d of the %d queued requests, want 4 (2 MiB of room at 512 KiB each)", got, n)
	}
	open.Store(true)
	waitFor(t, "every request delivered", time.Minute, func() bool {
		got, _ := up.snapshot()
		return len(got) >= n
	})
	got, byKey := up.snapshot()
	if len(got) != n {
		t.Errorf("%d deliveries, want %d", len(got), n)
	}
	for idem, k := range byKey {
		if k != 1 {
			t.Errorf("request %s delivered %d times", idem, k)
		}
	}
	for _, d := range got {
		i, _ := strconv.Atoi(d.path[len("/big/"):])
		if !bytes.Equal(d.body, bytes.Repeat([]byte{byte(i)}, 400<<10)) {
			t.Errorf("%s: body of %d bytes differs from the one queued", d.path, len(d.body))
		}
	}
}
