package fleet_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// BenchmarkMemory100K fills a Sync and a Lease with DefaultMaxKeys keys
// (each asked twice: the first request is cold, the second makes an
// entry) and reports the heap each holds per key, the keys' own strings
// (30 bytes, made before the first reading) not counted. Run it with
// -benchtime 1x: one operation is one whole fill (~20 s on Redis).
func BenchmarkMemory100K(b *testing.B) {
	srv := redistest.StartServer(b)
	st := fleet.OpenRedis(b, redisstore.Options{Addrs: []string{srv.Addr}})
	ctx := context.Background()
	const n = fleet.DefaultMaxKeys
	heap := func() int64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	for _, kind := range []string{"sync", "lease"} {
		b.Run(kind, func(b *testing.B) {
			keys := make([]string, n)
			for i := range keys {
				keys[i] = fmt.Sprintf("%s|api|3f2a91c0|10.%d.%d.%d", kind, i>>16, (i>>8)&255, i&255)
			}
			var perKey float64
			for b.Loop() {
				before := heap()
				var s interface {
					sluice.Store
					Close() error
				}
				var err error
				if kind == "sync" {
					s, err = fleet.NewSync(st, fleet.SyncOptions{Interval: time.Hour})
				} else {
					s, err = fleet.NewLease(st, fleet.LeaseOptions{})
				}
				if err != nil {
					b.Fatal(err)
				}
				for round := range 2 {
					for i, k := range keys {
						r := sluice.Request{Key: k, Algorithm: sluice.TokenBucket, Limit: sluice.PerHour(1000), Cost: 1, Now: sluicetest.T0.Add(time.Duration(round*n+i) * time.Microsecond)}
						if _, err := s.Take(ctx, r); err != nil {
							b.Fatal(err)
						}
					}
				}
				perKey = float64(heap()-before) / n
				runtime.KeepAlive(s)
				s.Close()
			}
			runtime.KeepAlive(keys)
			b.ReportMetric(perKey, "B/key")
		})
	}
}
