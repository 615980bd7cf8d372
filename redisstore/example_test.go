package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// A limiter shared by every instance that points at the same Redis. (Not
// run as a test: it needs a Redis at 127.0.0.1:6379.)
func Example() {
	ctx := context.Background()
	store, err := redisstore.New(ctx, redisstore.Options{
		Addrs:     []string{"127.0.0.1:6379"},
		Timeout:   50 * time.Millisecond,
		RedisTime: true, // decide on Redis' clock, whatever the instances' clocks say
	})
	if err != nil {
		fmt.Println("redis unreachable:", errors.Is(err, sluice.ErrStoreUnavailable))
		return
	}
	defer store.Close()
	lim, err := sluice.NewLimiter(store, sluice.GCRA, sluice.PerMinute(100))
	if err != nil {
		panic(err)
	}
	d, err := lim.Allow(ctx, "user:42")
	switch {
	case errors.Is(err, sluice.ErrStoreUnavailable):
		fmt.Println("store down: fail open or closed, as configured")
	case d.Allowed:
		fmt.Println("allowed, remaining", d.Remaining)
	default:
		fmt.Println("limited, retry after", d.RetryAfter)
	}
}
