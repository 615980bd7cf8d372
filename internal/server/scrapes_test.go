package server_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/memstore"
)

// gatedGatherer holds each Gather until the test lets one go (a value on
// release), counting those begun and those in progress.
type gatedGatherer struct {
	release      chan struct{}
	begun, doing atomic.Int64
}

func (g *gatedGatherer) Gather() ([]*dto.MetricFamily, error) {
	g.doing.Add(1)
	defer g.doing.Add(-1)
	g.begun.Add(1)
	<-g.release
	return nil, nil
}

// TestScrapesBounded: /metrics is open to anyone, and a scrape is dear
// (a full Gather and a body of up to a megabyte with the Envoy labels
// full: some 7 ms of CPU, where a decision takes microseconds), so a
// client sending many at once must not have them gathered all at once:
// at most server.MaxScrapes gather, the others wait their turn and are
// all answered. Once every scrape has reached the handler, the gathers are
// let go one at a time, and each time no more than MaxScrapes are in
// progress.
func TestScrapesBounded(t *testing.T) {
	const n = 3 * server.MaxScrapes
	g := &gatedGatherer{release: make(chan struct{}, n)}
	var arrived atomic.Int64
	f := start(t, memstore.New(memstore.Options{}), "", func(o *server.Options) { o.Gatherer = g })
	h := f.srv.Config.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	var once sync.Once
	letAllGo := func() { once.Do(func() { close(g.release) }) }
	t.Cleanup(letAllGo) // before the servers close: they wait for their handlers
	var wg sync.WaitGroup
	codes := make(chan int, n)
	for range n {
		wg.Go(func() {
			codes <- getStatus(context.Background(), srv.URL+"/metrics")
		})
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second) // a hang guard: these come in milliseconds
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 30s (begun %d, in progress %d)", what, g.begun.Load(), g.doing.Load())
			}
			time.Sleep(time.Millisecond)
		}
	}
	wait("every scrape at the handler and the first gathers begun", func() bool {
		return arrived.Load() == n && g.begun.Load() >= server.MaxScrapes
	})
	for k := 1; k <= n; k++ {
		if d := g.doing.Load(); d > server.MaxScrapes {
			letAllGo()
			t.Fatalf("%d scrapes gathered at once, want at most %d", d, server.MaxScrapes)
		}
		g.release <- struct{}{}
		want := min(int64(n), int64(server.MaxScrapes+k))
		wait("the next gather begun", func() bool { return g.begun.Load() >= want })
	}
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != http.StatusOK {
			t.Errorf("a scrape that waited its turn was answered %d, want 200", c)
		}
	}
}

// getStatus GETs url and reads its whole answer: its status, or -1 if the
// request failed (the caller's t may have ended: nothing is reported).
func getStatus(ctx context.Context, url string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return -1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}
