package deferq_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// boundQueue is an instance named consumer replaying rule "big" (bodies
// up to 512 KiB) from Redis c, holding at most room bytes, whose limit
// lets requests go once open is set; log (nil: none) receives its logs.
// Its claim rounds come every 3 s (ClaimIdle/4), and its sends are cut off
// after 5 s (under ClaimIdle/2): a send cut off is sent again, which the
// tests count as a second arrival. It was 1 s (ClaimIdle 4 s), which a
// 300 KiB send on a loaded machine can take. A margin, not a cure: a
// send here cannot have minutes while claim rounds come every few
// seconds.
func boundQueue(t *testing.T, c rueidis.Client, up *upstream, consumer string, room int64, open *atomic.Bool, log slog.Handler) *deferq.Queue {
	t.Helper()
	if log == nil {
		log = slog.DiscardHandler
	}
	q, err := newQueue(deferq.Options{Client: c, Consumer: consumer, Upstream: mustURL(t, up.srv.URL), MaxHeldBytes: room,
		ClaimIdle: 12 * time.Second, DeliveryTimeout: 5 * time.Second, Logger: slog.New(log)})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "big", MaxBodyBytes: 512 << 10, Take: func(context.Context, []string) (sluice.Decision, error) {
		if open.Load() {
			return sluice.Decision{Allowed: true}, nil
		}
		return sluice.Decision{RetryAfter: 50 * time.Millisecond}, nil
	}}})
	return q
}

// runUntil runs q until stop is called (or the test ends), stop waiting
// for it to let go of what it holds.
func runUntil(t *testing.T, q *deferq.Queue) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

// Claims count against the bound on what an instance holds: two
// instances each holding as much as their 3 MiB lets them (6 requests of
// 300 KiB), stopped, left 12 for a survivor with the same bound, which
// claimed all 12 (3.6 MiB) in its first claim round. It holds at most
// what fits; the rest wait in Redis for its next rounds, and all are
// delivered, each once.
func TestClaimsHeldWithinBound(t *testing.T) {
	srv := redistest.StartServer(t)
	c := client(t, srv.Addr)
	up := newUpstream(t, nil)
	const room, size, n = 3 << 20, 300 << 10, 12
	var open atomic.Bool
	a := boundQueue(t, c, up, "a", room, &open, nil)
	for i := range n {
		enqueue(t, a, "big", "k"+strconv.Itoa(i), http.MethodPost, "/big/"+strconv.Itoa(i), bytes.Repeat([]byte{byte(i)}, size))
	}
	stopA := runUntil(t, a)
	waitFor(t, "a to hold as much as its bound lets it", 30*time.Second, func() bool { return pendingWith(t, c, "big", "a") == n/2 })
	stopB := runUntil(t, boundQueue(t, c, up, "b", room, &open, nil))
	waitFor(t, "b to hold the rest", 30*time.Second, func() bool { return pendingWith(t, c, "big", "b") == n/2 })
	stopA()
	stopB()

	runUntil(t, boundQueue(t, c, up, "s", room, &open, nil))
	waitFor(t, "the survivor to claim as much as its bound lets it", 30*time.Second, func() bool {
		return pendingWith(t, c, "big", "s")*size+512<<10+deferq.MaxHeadBytes > room
	})
	if got := pendingWith(t, c, "big", "s"); got*size > room {
		t.Fatalf("the survivor holds %d requests of %d KiB, %d KiB in all, over its bound (%d KiB)", got, size>>10, got*size>>10, room>>10)
	}
	open.Store(true)
	var most int64
	waitFor(t, "every request delivered", time.Minute, func() bool {
		most = max(most, pendingWith(t, c, "big", "s"))
		got, _ := up.snapshot()
		return len(got) >= n
	})
	if most*size > room {
		t.Errorf("the survivor held up to %d requests of %d KiB while sending, over its bound (%d KiB)", most, size>>10, room>>10)
	}
	got, byKey := up.snapshot()
	if len(got) != n || len(byKey) != n {
		t.Fatalf("upstream saw %d arrivals of %d ids, want %d each once", len(got), len(byKey), n)
	}
}

// A survivor whose bound is full of requests waiting for an older one of
// their key, held by an instance now gone, still claims that one: claim
// rounds, bounded, would never take it. Each instance here holds one
// request (its bound fits one); a holds k's first, s reads k's second,
// a stops: s claims the first, lets go of the second to stay within its
// bound, sends the first, then claims and sends the second.
func TestClaimsBoundedStillClaimHeads(t *testing.T) {
	srv := redistest.StartServer(t)
	c := client(t, srv.Addr)
	up := newUpstream(t, nil)
	const room, size = 500 << 10, 300 << 10 // one held (read while none is), and not two
	var closed, open atomic.Bool
	a := boundQueue(t, c, up, "a", room, &closed, nil)
	first := enqueue(t, a, "big", "k", http.MethodPost, "/big/1", bytes.Repeat([]byte{1}, size))
	second := enqueue(t, a, "big", "k", http.MethodPost, "/big/2", bytes.Repeat([]byte{2}, size))
	stopA := runUntil(t, a)
	waitFor(t, "a to hold the first request", 30*time.Second, func() bool { return pendingWith(t, c, "big", "a") == 1 })
	open.Store(true) // s sends what it may
	letGo := make(letGoLog, 100)
	runUntil(t, boundQueue(t, c, up, "s", room, &open, letGo))
	waitFor(t, "s to hold the second request", 30*time.Second, func() bool { return pendingWith(t, c, "big", "s") == 1 })
	stopA()
	waitFor(t, "both requests delivered", time.Minute, func() bool {
		got, _ := up.snapshot()
		return len(got) >= 2
	})
	select {
	case id := <-letGo:
		if id != second {
			t.Errorf("s let go of %s, want the second request %s", id, second)
		}
	default:
		t.Errorf("s did not let go of the second request when it claimed the first: it held both, over its bound (one)")
	}
	got, byKey := up.snapshot()
	if len(got) != 2 || got[0].path != "/big/1" || got[1].path != "/big/2" {
		t.Fatalf("upstream saw %v, want /big/1 then /big/2", got)
	}
	for _, id := range []string{first, second} {
		if byKey[id] != 1 {
			t.Errorf("%s arrived %d times, want once", id, byKey[id])
		}
	}
}

// letGoLog passes on the ids of held requests let go to stay within the
// bound ("defer: let go to stay within the bound" at debug level).
type letGoLog chan string

func (h letGoLog) Enabled(context.Context, slog.Level) bool { return true }
func (h letGoLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h letGoLog) WithGroup(string) slog.Handler            { return h }
func (h letGoLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "defer: let go to stay within the bound" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "id" {
			select {
			case h <- a.Value.String():
			default:
			}
		}
		return true
	})
	return nil
}
