package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// A request far behind the state's clock (an instance whose clock is
// hours behind the one that last charged the key) meets, in the bucket
// and GCRA steps, a debt at its time of up to hours × rate token-ticks,
// beyond the 2^53 that Lua's doubles hold exactly: Redis must still
// decide as memory does, and leave the state memory leaves.
func TestFarBackRedisEqualsMemory(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	t1 := sluicetest.T0
	for _, alg := range sluice.Algorithms() {
		for _, l := range []sluice.Limit{sluice.PerDay(1_000_000), sluice.PerSecond(999_983).WithBurst(1_000_000)} {
			if !alg.TakesBurst() {
				l.Burst = 0 // a window takes no burst
			}
			for _, back := range []time.Duration{time.Hour + 7*time.Minute, 13 * time.Hour, 23*time.Hour + 59*time.Minute} {
				name := fmt.Sprintf("%v %v, %v back", alg, l, back)
				mem := memstore.New(memstore.Options{})
				rs := open(t, redisstore.Options{Addrs: []string{srv.Addr}, Prefix: fmt.Sprintf("far:%d:", time.Now().UnixNano())})
				steps := []sluice.Request{
					{Cost: 999_999, Now: t1},                   // nearly the whole burst
					{Cost: 7, Now: t1.Add(-back), Force: true}, // far behind, forced
					{Cost: 1, Now: t1.Add(-back - 3)},
					{Cost: 1, Now: t1.Add(time.Microsecond)},
					{Cost: 2, Now: t1.Add(time.Second)},
					{Cost: 7305221545, Now: t1.Add(-back), Force: true}, // the debt to its cap
					{Cost: 1, Now: t1.Add(-back - 7)},
					{Cost: 3, Now: t1.Add(2 * time.Second)},
				}
				for i, r := range steps {
					r.Key, r.Algorithm, r.Limit = "k", alg, l
					md, err := mem.Take(ctx, r)
					if err != nil {
						t.Fatalf("%s: step %d: memory: %v", name, i, err)
					}
					rd, err := rs.Take(ctx, r)
					if err != nil {
						t.Fatalf("%s: step %d: redis: %v", name, i, err)
					}
					if md != rd {
						t.Fatalf("%s: step %d (cost %d at %v): memory %+v, redis %+v", name, i, r.Cost, r.Now.Sub(t1), md, rd)
					}
				}
			}
		}
	}
}
