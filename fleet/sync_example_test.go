package fleet_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// TestMain starts a real redis-server for the runnable examples and hands
// its address over in REDIS_ADDR (not in the worker processes of the
// multi-process tests, which are given theirs). It fails the run, never
// skips, when Redis cannot start.
func TestMain(m *testing.M) {
	if os.Getenv("SLUICE_FLEET_WORKER") != "" {
		os.Exit(m.Run())
	}
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

func openExampleRedis(ctx context.Context) *redisstore.Store {
	store, err := redisstore.New(ctx, redisstore.Options{
		Addrs:     []string{os.Getenv("REDIS_ADDR")}, // such as "127.0.0.1:6379"
		RedisTime: true,
		// Per call; the default, 50ms, suits a Redis next door. These
		// examples run as tests on machines busy enough to miss it.
		Timeout: time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	return store
}

// A soft limit: the instance decides locally and sends its hits to Redis
// in one batch every 100ms. Alone, it decides exactly as Redis would; in a
// fleet of n instances the limit may be passed by at most
// (n−1)/n · rate · (2·interval + RTT) (see Sync).
func ExampleNewSync() {
	ctx := context.Background()
	store := openExampleRedis(ctx)
	defer store.Close()
	soft, err := fleet.NewSync(store, fleet.SyncOptions{Interval: 100 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	defer soft.Close() // sends the hits not sent yet
	lim, err := sluice.NewLimiter(soft, sluice.GCRA, sluice.PerMinute(3), sluice.WithName("example-sync"))
	if err != nil {
		log.Fatal(err)
	}
	for range 4 {
		d, err := lim.Allow(ctx, "tenant-1")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(d.Allowed, d.Remaining)
	}
	// Output:
	// true 2
	// true 1
	// true 0
	// false 0
}

// A hard limit shared by two instances: each reserves quota from Redis in
// chunks (auto: a sixteenth of what is left, down to one) and spends it
// locally. Together they never admit more than the limit.
func ExampleNewLease() {
	ctx := context.Background()
	var instances []*sluice.Limiter
	for range 2 {
		store := openExampleRedis(ctx)
		defer store.Close()
		hard, err := fleet.NewLease(store, fleet.LeaseOptions{}) // lease: auto
		if err != nil {
			log.Fatal(err)
		}
		defer hard.Close() // gives back the units not spent
		lim, err := sluice.NewLimiter(hard, sluice.GCRA, sluice.PerHour(10), sluice.WithName("example-lease"))
		if err != nil {
			log.Fatal(err)
		}
		instances = append(instances, lim)
	}
	admitted := 0
	for i := range 30 {
		d, err := instances[i%2].Allow(ctx, "tenant-1")
		if err != nil {
			log.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
	}
	fmt.Println("admitted", admitted, "of 30")
	// Output: admitted 10 of 30
}
