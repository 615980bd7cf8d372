package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestRefundRestores takes a request and refunds it at once, at random
// points of random traces, and requires every later decision to equal the
// reference that never saw the request: a refund with nothing in between
// is exact, for every algorithm.
func TestRefundRestores(t *testing.T) {
	srv := redistest.StartServer(t)
	s := openStore(t, Options{Addrs: []string{srv.Addr}})
	ctx := context.Background()
	seed := sluicetest.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 9))
	limits := []sluice.Limit{sluice.PerSecond(3), sluice.Every(5, 700*time.Millisecond).WithBurst(2), sluice.PerMinute(12).WithSegments(3), sluice.Every(4, time.Second).WithBurst(9)}
	for _, alg := range sluice.Algorithms() {
		for li, l := range limits {
			if l.Burst != 0 && !alg.TakesBurst() {
				continue // a window takes no burst
			}
			ref := sluicetest.NewReference()
			key := fmt.Sprintf("refund/%d/%v/%d", seed, alg, li)
			now := sluicetest.T0
			refunds := 0
			for i := range 600 {
				switch rng.IntN(4) {
				case 0:
				case 1:
					now = now.Add(time.Duration(rng.Int64N(5000)+1) * time.Microsecond)
				default:
					now = now.Add(time.Duration(rng.Int64N(int64(l.Period)/l.Rate*2/1000)+1) * time.Microsecond)
				}
				r := sluice.Request{Key: key, Algorithm: alg, Limit: l, Cost: rng.Int64N(l.BurstOrRate() + 1), Now: now}
				if rng.IntN(3) == 0 { // take and refund: the reference sees nothing
					qs := make([]request, 1)
					if err := s.prepare(&r, &qs[0]); err != nil {
						t.Fatal(err)
					}
					rps, err := s.run(ctx, "take", qs, []int{0}, nil)
					if err != nil {
						t.Fatal(err)
					}
					if rps[0].allowed && r.Cost > 0 {
						if _, err := s.run(ctx, "refund", qs, []int{0}, rps); err != nil {
							t.Fatal(err)
						}
						refunds++
						continue
					}
					// denied: nothing was counted, so the reference may see it
				}
				want, _ := ref.Take(ctx, r)
				got, err := s.Take(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Fatalf("%v %v burst %d step %d (after %d refunds): Take(cost %d at %d µs) = %+v, reference %+v", alg, l, l.Burst, i, refunds, r.Cost, r.Now.UnixMicro(), got, want)
				}
			}
			if refunds == 0 {
				t.Errorf("%v %v: no refund was exercised", alg, l)
			}
		}
	}
}

// windowShare returns l as alg takes it: a window takes no burst, so its
// burst is dropped (a window admits the rate whatever the burst).
func windowShare(alg sluice.Algorithm, l sluice.Limit) sluice.Limit {
	if !alg.TakesBurst() {
		l.Burst = 0
	}
	return l
}
