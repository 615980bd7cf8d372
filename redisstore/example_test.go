package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// TestMain starts a real redis-server for the runnable Example and hands
// its address over in REDIS_ADDR. It fails the run, never skips, when Redis
// cannot start.
func TestMain(m *testing.M) {
	srv, err := redistest.StartMain()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("REDIS_ADDR", srv.Addr)
	code := m.Run()
	srv.Stop()
	os.Exit(code)
}

// Two instances of a service (two Stores on one Redis) share one count
// per key: 100 requests an hour per user across the fleet. RedisTime makes
// every decision on Redis' clock, so the instances' clocks do not matter.
func Example() {
	ctx := context.Background()
	open := func() *redisstore.Store {
		store, err := redisstore.New(ctx, redisstore.Options{
			Addrs:     []string{os.Getenv("REDIS_ADDR")}, // such as "127.0.0.1:6379"
			RedisTime: true,
			// Per call and per connect; the default, 50ms, suits a Redis
			// next door. This example runs as a test on machines busy
			// enough to miss it (1s was missed once, under -race beside
			// other packages' tests).
			Timeout: 10 * time.Second,
		})
		if err != nil {
			log.Fatal(err) // wraps sluice.ErrStoreUnavailable
		}
		return store
	}
	a, b := open(), open() // in real life: one per process
	defer a.Close()
	defer b.Close()
	limA, _ := sluice.NewLimiter(a, sluice.GCRA, sluice.PerHour(100), sluice.WithName("api"))
	limB, _ := sluice.NewLimiter(b, sluice.GCRA, sluice.PerHour(100), sluice.WithName("api"))
	limA.Reset(ctx, "user:42") // start the example from a fresh count

	for _, lim := range []*sluice.Limiter{limA, limB, limA} {
		d, err := lim.Allow(ctx, "user:42")
		switch {
		case errors.Is(err, sluice.ErrStoreUnavailable):
			fmt.Println("store down: allow or deny, your policy")
		case err != nil:
			log.Fatal(err) // a bug: an invalid cost or limit
		default:
			fmt.Println("allowed:", d.Allowed, "remaining:", d.Remaining)
		}
	}
	r, _ := limA.Request("user:42", limA.Now(), 1)
	fmt.Println("redis key:", a.KeyOf(&r))
	// Output:
	// allowed: true remaining: 99
	// allowed: true remaining: 98
	// allowed: true remaining: 97
	// redis key: sluice:api|gcra,100/h|{user:42}
}
