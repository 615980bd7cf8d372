package deferq_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A request whose send failed waits for its next_attempt_at (the back-off,
// here the upstream's Retry-After) also when another instance takes it
// over: the taker used to send it at once, as soon as it had claimed it.
func TestTakenOverRetryWaitsForNextAttempt(t *testing.T) {
	srv := redistest.StartServer(t)
	var mu sync.Mutex
	var sends []time.Time
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sends = append(sends, time.Now())
		n := len(sends)
		mu.Unlock()
		if n == 1 {
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(up.Close)
	c := client(t, srv.Addr)
	opts := func(consumer string) deferq.Options {
		return deferq.Options{Client: c, Consumer: consumer, Upstream: mustURL(t, up.URL), ClaimIdle: time.Second, DeliveryTimeout: 400 * time.Millisecond}
	}
	a, err := deferq.New(opts("a"))
	if err != nil {
		t.Fatal(err)
	}
	a.SetRules([]deferq.Rule{{Name: "jobs"}})
	id := enqueue(t, a, "jobs", "k", http.MethodPost, "/job", []byte("job"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	var st deferq.Status
	waitFor(t, "the first send failed", 30*time.Second, func() bool {
		st, err = a.Status(context.Background(), id)
		return err == nil && st.State == "failed"
	})
	cancel() // a stops holding it
	<-done
	next, err := time.Parse(time.RFC3339Nano, st.NextAttempt)
	if err != nil {
		t.Fatalf("next_attempt_at %q: %v", st.NextAttempt, err)
	}
	b, err := deferq.New(opts("b"))
	if err != nil {
		t.Fatal(err)
	}
	b.SetRules([]deferq.Rule{{Name: "jobs"}})
	start(t, b)
	waitFor(t, "delivered by b", 30*time.Second, func() bool {
		st, err = b.Status(context.Background(), id)
		return err == nil && st.State == "delivered"
	})
	mu.Lock()
	defer mu.Unlock()
	if len(sends) != 2 || sends[1].Before(next) {
		t.Errorf("sends at %v; want 2, the second not before next_attempt_at %v (Retry-After: 3)", sends, next)
	}
}
