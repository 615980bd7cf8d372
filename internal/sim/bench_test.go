package sim_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/sim"
	"github.com/sluicehq/sluice/memstore"
)

// BenchmarkRun replays a 10,000-line trace over 100 keys; ns/op is per
// trace, so the cost per line is ns/op ÷ 10,000.
func BenchmarkRun(b *testing.B) {
	var tb strings.Builder
	for i := range 10000 {
		fmt.Fprintf(&tb, "%d.%06d,key-%d\n", 1763726400+i/100, (i%100)*10000, i%100)
	}
	trace := tb.String()
	for _, alg := range []sluice.Algorithm{sluice.TokenBucket, sluice.SlidingWindowLog} {
		b.Run(alg.String(), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(trace)))
			for b.Loop() {
				opt := sim.Options{Algorithm: alg, Limit: sluice.PerSecond(50), Store: memstore.New(memstore.Options{Shards: 1})}
				if _, err := sim.Run(context.Background(), opt, strings.NewReader(trace), "bench", io.Discard); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReader reads the same trace without deciding anything.
func BenchmarkReader(b *testing.B) {
	var tb strings.Builder
	for i := range 10000 {
		fmt.Fprintf(&tb, "%d.%06d,key-%d,2 # c\n", 1763726400+i/100, (i%100)*10000, i%100)
	}
	trace := tb.String()
	b.ReportAllocs()
	b.SetBytes(int64(len(trace)))
	for b.Loop() {
		r := sim.NewReader(strings.NewReader(trace), "bench")
		for {
			if _, err := r.Read(); err != nil {
				if err != io.EOF {
					b.Fatal(err)
				}
				break
			}
		}
	}
}
