package deferq_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// The back-off of a failed request is kept on Redis's clock, not on the
// clock of the instance that recorded the failure: taken over by an
// instance whose clock is an hour behind, a request failed once waits its
// 1 s back-off, as it would with the clocks in step. next_attempt_at used
// to be the recording instance's time plus the back-off, compared with the
// taker's time: the request (and every later one of its key) waited an
// hour more.
func TestBackoffIgnoresInstanceClocks(t *testing.T) {
	srv := redistest.StartServer(t)
	up := newUpstream(t, func(_ delivery, n int) int {
		if n == 1 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	c := client(t, srv.Addr)
	opts := func(consumer string, skew time.Duration) deferq.Options {
		return deferq.Options{Client: c, Consumer: consumer, Upstream: mustURL(t, up.srv.URL), ClaimIdle: time.Second,
			DeliveryTimeout: 400 * time.Millisecond, Now: func() time.Time { return time.Now().Add(skew) }}
	}
	a, err := newQueue(opts("a", time.Hour)) // an hour ahead
	if err != nil {
		t.Fatal(err)
	}
	a.SetRules([]deferq.Rule{{Name: "jobs", Take: admitAll}})
	id := enqueue(t, a, "jobs", "k", http.MethodPost, "/job", []byte("job"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	awaitState(t, a, id, "failed")
	cancel() // a stops holding it
	<-done
	b, err := newQueue(opts("b", 0))
	if err != nil {
		t.Fatal(err)
	}
	b.SetRules([]deferq.Rule{{Name: "jobs", Take: admitAll}})
	start(t, b)
	// A bound, not a wait: b claims it after claim_idle (1 s) and sends it
	// after the 1 s back-off.
	awaitState(t, b, id, "delivered")
}
