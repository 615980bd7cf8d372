package redisstore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// BenchmarkTake is one decision per op against a real redis-server, from
// parallel goroutines (auto-pipelined), per algorithm, over 100,000 keys.
// bench/redis holds the comparison with other libraries.
func BenchmarkTake(b *testing.B) {
	srv := redistest.StartServer(b)
	s := open(b, redisstore.Options{Addrs: []string{srv.Addr}})
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = "bench:" + strconv.Itoa(i)
	}
	for _, alg := range sluice.Algorithms() {
		b.Run(alg.String(), func(b *testing.B) {
			b.ReportAllocs()
			var n atomic.Int64
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					r := sluice.Request{Key: keys[i%int64(len(keys))], Algorithm: alg, Limit: sluice.PerSecond(1000), Cost: 1, Now: start.Add(time.Duration(i) * time.Microsecond)}
					if _, err := s.Take(context.Background(), r); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
