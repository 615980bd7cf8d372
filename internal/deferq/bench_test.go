package deferq_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// BenchmarkEnqueue: deferred requests queued per second (one script per
// request: XADD, the status hash, the key's list), 1 KiB bodies, from
// parallel goroutines against a real redis-server.
func BenchmarkEnqueue(b *testing.B) {
	srv := redistest.StartServer(b)
	q, err := newQueue(deferq.Options{Client: client(b, srv.Addr), Upstream: mustURL(b, "http://127.0.0.1:1")})
	if err != nil {
		b.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "bench", MaxQueue: 10_000_000}})
	body := bytes.Repeat([]byte("x"), 1024)
	var n atomic.Int64
	b.ReportAllocs()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		r := httptest.NewRequest("POST", "/orders", nil)
		r.Header.Set("Content-Type", "application/json")
		for pb.Next() {
			i := n.Add(1)
			if _, err := q.Enqueue(context.Background(), "bench", []string{"k" + strconv.FormatInt(i%1000, 10)}, r, r.Header, body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "enqueued/s")
}

// BenchmarkReplay: deliveries per second of one instance draining a queue
// of 1 KiB requests spread over 100 keys (order kept per key), with no
// rate limit in the way, to a local upstream answering 200.
func BenchmarkReplay(b *testing.B) {
	srv := redistest.StartServer(b)
	var got atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got.Add(1) }))
	b.Cleanup(up.Close)
	q, err := newQueue(deferq.Options{Client: client(b, srv.Addr), Upstream: mustURL(b, up.URL), Concurrency: 32})
	if err != nil {
		b.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "bench", MaxQueue: 10_000_000}})
	body := bytes.Repeat([]byte("x"), 1024)
	r := httptest.NewRequest("POST", "/orders", nil)
	for i := range b.N {
		if _, err := q.Enqueue(context.Background(), "bench", []string{"k" + strconv.Itoa(i%100)}, r, r.Header, body); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	for got.Load() < int64(b.N) {
		time.Sleep(time.Millisecond)
	}
	el := time.Since(start)
	b.StopTimer()
	cancel()
	<-done
	b.ReportMetric(float64(b.N)/el.Seconds(), "delivered/s")
}
