package fleet

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// nullShared is a shared store that holds nothing: it admits every
// request, grants every unit asked and reads every key as new, so that a
// test of a decorator's memory measures the decorator's alone.
type nullShared struct{}

func (nullShared) Take(_ context.Context, r sluice.Request) (sluice.Decision, error) {
	return sluice.Decision{Allowed: true, Limit: r.Limit.Rate}, nil
}

func (n nullShared) TakeAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	for i := range rs {
		ds[i], _ = n.Take(ctx, rs[i])
	}
	return nil
}

func (n nullShared) SyncTake(ctx context.Context, r sluice.Request) (sluice.Decision, redisstore.Taken, error) {
	d, err := n.Take(ctx, r)
	return d, redisstore.Taken{}, err
}

func (nullShared) Sync(_ context.Context, ops []redisstore.SyncOp) error {
	for i := range ops {
		ops[i].State, ops[i].Err = sluice.State{}, nil
	}
	return nil
}

func (nullShared) Lease(_ context.Context, r sluice.Request, _ redisstore.ReturnOp) (redisstore.Grant, error) {
	return redisstore.Grant{Units: r.Cost, Now: r.Now.UnixMicro()}, nil
}

func (nullShared) Return(context.Context, []redisstore.ReturnOp) error { return nil }

// refusing is a shared store that refuses every request for a second.
type refusing struct{ nullShared }

func (refusing) Take(_ context.Context, r sluice.Request) (sluice.Decision, error) {
	return sluice.Decision{Limit: r.Limit.Rate, RetryAfter: time.Second, ResetAfter: time.Second}, nil
}

// heapInUse is the heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestMemoryBound1M sends 1,000,000 distinct keys, each asked twice in a
// row (a key's second request makes it an entry while there is room) and
// never again, through a Sync, a Lease and an over-limit cache at their
// default bounds (DefaultMaxKeys, DefaultOverLimitKeys: 100,000), with a
// shared store that holds nothing. Request time moves 5 µs a key, the
// limit's period (and the refusals' RetryAfter) is a second, 200,000 keys,
// and Sync sends a batch every 150,000 keys: each decorator fills up to its
// bound, then keys come and go as under wide traffic. Each must hold at
// most its bound, and the heap in use must stop growing once the bound is
// reached (what the last 600,000 keys add, at most a twentieth of what the
// first 400,000 took): a Go map whose keys come and go keeps growing its
// tables (the over-limit cache took 53 MB at 1,000,000 keys, 91 MB at
// 5,000,000, for at most 100,000 held), so each decorator copies its map
// once as many keys were deleted from it as it holds.
func TestMemoryBound1M(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("2,000,000 decisions per decorator, and the heap they leave")
	}
	const n, mark = 1_000_000, 400_000
	ctx := context.Background()
	limit := sluice.PerSecond(1000)
	for _, kind := range []string{"sync", "lease", "overlimit"} {
		t.Run(kind, func(t *testing.T) {
			var s sluice.Store
			var held func() int
			var bound int
			var batch func()
			switch kind {
			case "sync":
				x, err := NewSync(nullShared{}, SyncOptions{Interval: time.Hour}) // batches by Flush, below
				if err != nil {
					t.Fatal(err)
				}
				defer x.Close()
				s, held, bound = x, func() int { return x.Stats().Keys }, DefaultSyncMaxKeys
				var prev []*syncEntry
				batch = func() { prev, _ = x.flush(prev, nil) } // the loop's batch: keys idle since the last one go

			case "lease":
				x, err := NewLease(nullShared{}, LeaseOptions{})
				if err != nil {
					t.Fatal(err)
				}
				defer x.Close()
				s, held, bound = x, func() int { return x.Stats().Keys }, DefaultLeaseMaxKeys
			default:
				x := NewOverLimitCache(refusing{}, OverLimitOptions{})
				s, held, bound = x, x.Len, DefaultOverLimitKeys+overLimitShards // rounded up per shard
			}
			base := heapInUse()
			var atMark uint64
			for i := range n {
				if i == mark {
					atMark = heapInUse()
				}
				if batch != nil && i%150_000 == 0 {
					batch()
				}
				r := sluice.Request{Key: fmt.Sprintf("api|3f2a91c0|10.%d.%d.%d", i>>16, (i>>8)&255, i&255), Algorithm: sluice.TokenBucket, Limit: limit, Cost: 1,
					Now: sluicetest.T0.Add(time.Duration(5*i) * time.Microsecond)}
				for range 2 {
					if _, err := s.Take(ctx, r); err != nil {
						t.Fatal(err)
					}
				}
			}
			end := heapInUse()
			if h := held(); h > bound {
				t.Errorf("after %d keys: %d held, want at most %d", n, h, bound)
			}
			first, rest := int64(atMark)-int64(base), int64(end)-int64(atMark)
			t.Logf("%s: %d keys held; heap in use %.1f MB after %d keys, %.1f MB after %d (%+.1f MB for the last %d)",
				kind, held(), float64(first)/1e6, mark, float64(int64(end)-int64(base))/1e6, n, float64(rest)/1e6, n-mark)
			if rest > first/20 {
				t.Errorf("heap in use grew by %d bytes over the last %d keys, against %d over the first %d: want it bounded (at most a twentieth more)", rest, n-mark, first, mark)
			}
			runtime.KeepAlive(s)
		})
	}
}
