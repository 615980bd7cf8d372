package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

func Example() {
	store := memstore.New(memstore.Options{MaxKeys: 100_000})
	lim, _ := sluice.NewLimiter(store, sluice.GCRA, sluice.PerSecond(5).WithBurst(2))
	now := time.Unix(1_700_000_000, 0)
	for i := range 3 {
		d, _ := lim.AllowAt(context.Background(), "ip:192.0.2.7", now, 1)
		fmt.Printf("%d: allowed=%v remaining=%d retry_after=%v\n", i, d.Allowed, d.Remaining, d.RetryAfter)
	}
	fmt.Println("keys held:", store.Len())
	// Output:
	// 0: allowed=true remaining=1 retry_after=0s
	// 1: allowed=true remaining=0 retry_after=0s
	// 2: allowed=false remaining=0 retry_after=200ms
	// keys held: 1
}
