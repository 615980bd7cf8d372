package server_test

import (
	"context"
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

// heldGatherer holds each Gather until release is closed, and tells each
// one begun on begun.
type heldGatherer struct {
	release chan struct{}
	begun   chan struct{}
}

func (g *heldGatherer) Gather() ([]*dto.MetricFamily, error) {
	g.begun <- struct{}{}
	<-g.release
	return nil, nil
}

// TestScrapeGoneWhileWaiting: a scrape waiting its turn (MaxScrapes
// gathers in progress) whose client leaves is not gathered once a place
// frees. Else a client sending scrapes and hanging up at once queues
// gathers without bound, each a full Gather for nobody, and every scrape
// after them, Prometheus' own, waits behind them all.
func TestScrapeGoneWhileWaiting(t *testing.T) {
	const held, gone = server.MaxScrapes, 3
	g := &heldGatherer{release: make(chan struct{}), begun: make(chan struct{}, held+gone)}
	f := start(t, memstore.New(memstore.Options{}), "", func(o *server.Options) { o.Gatherer = g })
	h := f.srv.Config.Handler
	arrived := make(chan struct{}, held+gone)
	left := make(chan struct{}, gone)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("leave") {
			context.AfterFunc(r.Context(), func() { left <- struct{}{} })
		}
		arrived <- struct{}{}
		h.ServeHTTP(w, r)
	}))
	var once sync.Once
	letGo := func() { once.Do(func() { close(g.release) }) }
	t.Cleanup(srv.Close)
	t.Cleanup(letGo) // before the servers close: they wait for their handlers
	var wg sync.WaitGroup
	codes := make(chan int, held)
	for range held {
		wg.Go(func() {
			codes <- getStatus(context.Background(), srv.URL+"/metrics")
		})
	}
	for range held {
		<-g.begun
	}
	ctx, cancel := context.WithCancel(context.Background())
	for range gone {
		wg.Go(func() {
			getStatus(ctx, srv.URL+"/metrics?leave")
		})
	}
	for range held + gone {
		<-arrived
	}
	cancel()
	for range gone {
		<-left // the server has seen each client leave
	}
	letGo()
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != http.StatusOK {
			t.Errorf("a scrape held in its gather was answered %d, want 200", c)
		}
	}
	if n := len(g.begun); n != 0 {
		t.Errorf("%d gathers begun for scrapes whose client had left while they waited, want 0", n)
	}
}

// firstHeld holds the first n Gathers until release is closed, telling
// each on begun; the others gather at once.
type firstHeld struct {
	n       atomic.Int64
	release chan struct{}
	begun   chan struct{}
}

func (g *firstHeld) Gather() ([]*dto.MetricFamily, error) {
	if g.n.Add(-1) >= 0 {
		g.begun <- struct{}{}
		<-g.release
	}
	return nil, nil
}

// TestScrapeWithTokenNotBehindAnonymous: with api.token_file, a scrape
// carrying the token (Prometheus') has places of its own: anonymous
// scrapes holding every place, and more waiting, do not hold it back.
func TestScrapeWithTokenNotBehindAnonymous(t *testing.T) {
	const held, waiting = server.MaxScrapes, 2
	g := &firstHeld{release: make(chan struct{}), begun: make(chan struct{}, held)}
	g.n.Store(held)
	f := start(t, memstore.New(memstore.Options{}), "", func(o *server.Options) {
		o.Gatherer = g
		o.Token = []byte("s3cret")
	})
	h := f.srv.Config.Handler
	arrived := make(chan struct{}, held+waiting)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" {
			arrived <- struct{}{}
		}
		h.ServeHTTP(w, r)
	}))
	var once sync.Once
	letGo := func() { once.Do(func() { close(g.release) }) }
	t.Cleanup(srv.Close)
	t.Cleanup(letGo) // before the servers close: they wait for their handlers
	var wg sync.WaitGroup
	defer wg.Wait()
	defer letGo()
	for i := range held + waiting {
		wg.Go(func() { getStatus(context.Background(), srv.URL+"/metrics") })
		if i < held {
			<-g.begun // the places taken in turn: the held ones first
		}
	}
	for range held + waiting {
		<-arrived
	}
	// A hang guard only: the answer comes at once, or never while the
	// anonymous scrapes are held.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("a scrape with the token, %d anonymous ones gathering and %d waiting: %v", held, waiting, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a scrape with the token: %d, want 200", resp.StatusCode)
	}
}
