package deferq_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// An instance holds at most MaxHeldBytes of a rule's requests in memory:
// with bodies of up to 512 KiB and 3 MiB to hold, it reads 4 of the 12
// queued (2 at first, each counted at 512 KiB + MaxHeadBytes, then one at a
// time while those held at their size leave room for one more) (its first read took 100 before, 1.2 GB for a rule at 1000 held
// entries of the default 1 MiB bodies); the rest wait in Redis and are
// all delivered, each once, when the rule lets them go.
func TestHeldBytesBounded(t *testing.T) {
	g := newGated(t, 3<<20)
	q, c, up := g.q, g.c, g.up
	const n = 12
	for i := range n {
		enqueue(t, q, "big", "k"+strconv.Itoa(i), http.MethodPost, "/big/"+strconv.Itoa(i), bytes.Repeat([]byte{byte(i)}, 400<<10))
	}
	start(t, q)
	waitFor(t, "the instance to read as far as the bound lets it", 30*time.Second, func() bool {
		return pending(c, "big")*(400<<10)+512<<10+deferq.MaxHeadBytes > 3<<20
	})
	if got := pending(c, "big"); got != 4 {
		t.Fatalf("the instance holds %d of the %d queued requests, want 4 (3 MiB of room, 400 KiB each held, 512 KiB + 1 MiB each to read)", got, n)
	}
	g.open.Store(true)
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

// The bound counts each entry's header and target too, not only its
// body: with bodies of at most 1 KiB, 4 MiB to hold and requests carrying
// 400 KiB of headers each (under the daemon's header limit), an instance
// read all 12 queued at once (4.8 MB held, each unread entry counted at
// 1 KiB); it reads at most what fits, counted at the body cap plus
// MaxHeadBytes (8 of them here, over three reads).
func TestHeldBytesCountHeaders(t *testing.T) {
	srv := redistest.StartServer(t)
	up := newUpstream(t, nil)
	c := client(t, srv.Addr)
	const room = 4 << 20
	q, err := newQueue(deferq.Options{Client: c, Upstream: mustURL(t, up.srv.URL), MaxHeldBytes: room})
	if err != nil {
		t.Fatal(err)
	}
	take := func(context.Context, []string) (sluice.Decision, error) {
		return sluice.Decision{RetryAfter: time.Hour}, nil
	}
	q.SetRules([]deferq.Rule{{Name: "heads", MaxBodyBytes: 1 << 10, Take: take}})
	const n, head = 12, 400 << 10
	for i := range n {
		r := httptest.NewRequest(http.MethodPost, "/h/"+strconv.Itoa(i), nil)
		r.Header.Set("X-Big", strings.Repeat("h", head))
		if _, err := q.Enqueue(context.Background(), "heads", []string{"k" + strconv.Itoa(i)}, r, r.Header, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	start(t, q)
	pending := func() int { return int(pending(c, "heads")) }
	// It reads while the bound leaves room for one more entry at its
	// largest (1 KiB + MaxHeadBytes), those held counted at their size.
	waitFor(t, "the instance to read as far as the bound lets it", 30*time.Second, func() bool {
		return int64(pending())*head+1<<10+deferq.MaxHeadBytes > room
	})
	if got := pending(); int64(got)*head > room {
		t.Fatalf("the instance holds %d requests of %d KiB of headers each, %d KiB in all, over MaxHeldBytes (%d KiB)", got, head>>10, got*head>>10, room>>10)
	}
}

// A request whose target and headers, as they would be queued, take more
// than MaxHeadBytes is not queued (ErrHeadTooLarge): the bound above holds
// for every entry. One just under it is.
func TestEnqueueHeadTooLarge(t *testing.T) {
	srv := redistest.StartServer(t)
	q, err := newQueue(deferq.Options{Client: client(t, srv.Addr)})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "heads", Take: func(context.Context, []string) (sluice.Decision, error) {
		return sluice.Decision{Allowed: true}, nil
	}}})
	r := httptest.NewRequest(http.MethodGet, "/h", nil)
	r.Header.Set("X-Big", strings.Repeat("h", deferq.MaxHeadBytes-100))
	if _, err := q.Enqueue(context.Background(), "heads", []string{"k"}, r, r.Header, nil); err != nil {
		t.Fatalf("headers under MaxHeadBytes: %v", err)
	}
	r.Header.Set("X-Big", strings.Repeat("<", deferq.MaxHeadBytes/2)) // JSON takes 6 bytes for each
	if _, err := q.Enqueue(context.Background(), "heads", []string{"k"}, r, r.Header, nil); !errors.Is(err, deferq.ErrHeadTooLarge) {
		t.Fatalf("headers over MaxHeadBytes as queued: got %v, want ErrHeadTooLarge", err)
	}
}
