package server_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/memstore"
)

// TestReadyChecksShared: /readyz is open to anyone and each check asks
// the store (a PING on Redis; CLUSTER INFO of every node and a script on
// a Cluster), so a client sending many at once must not have the store
// asked as many times: the checks in progress at once share one question
// and its answer. Here 12 /readyz arrive while the store's answer is
// held: it is asked once, and all 12 get its answer.
func TestReadyChecksShared(t *testing.T) {
	const n = 12
	var asked, arrived atomic.Int64
	release := make(chan struct{})
	var once sync.Once
	letGo := func() { once.Do(func() { close(release) }) }
	f := start(t, memstore.New(memstore.Options{}), "", func(o *server.Options) {
		o.Ready = func(ctx context.Context) error {
			asked.Add(1)
			select {
			case <-release:
				return errors.New("store down")
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	})
	t.Cleanup(letGo)
	h := f.srv.Config.Handler
	f.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		h.ServeHTTP(w, r)
	})
	var wg sync.WaitGroup
	codes := make(chan int, n)
	for range n {
		wg.Go(func() {
			codes <- getStatus(context.Background(), f.srv.URL+"/readyz")
		})
	}
	deadline := time.Now().Add(30 * time.Second) // a hang guard: they come in milliseconds
	for arrived.Load() < n || asked.Load() < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d /readyz arrived, store asked %d times: not within 30s", arrived.Load(), n, asked.Load())
		}
		time.Sleep(time.Millisecond)
	}
	if a := asked.Load(); a != 1 {
		letGo()
		t.Fatalf("%d /readyz in progress asked the store %d times, want once", n, a)
	}
	letGo()
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != http.StatusServiceUnavailable {
			t.Errorf("a /readyz sharing the store's answer got %d, want its 503", c)
		}
	}
}
