package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// The common case: 2 requests a second per client, burst 2, in process.
// AllowAt takes the time explicitly so the output is reproducible; real
// code calls Allow, which reads the clock.
func Example() {
	store := memstore.New(memstore.Options{})
	lim, err := sluice.NewLimiter(store, sluice.TokenBucket, sluice.PerSecond(2))
	if err != nil {
		panic(err) // an invalid limit
	}
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, at := range []time.Duration{0, 0, 0, 500 * time.Millisecond} {
		d, err := lim.AllowAt(ctx, "203.0.113.7", now.Add(at), 1)
		if err != nil {
			fmt.Println("store could not decide:", err)
			continue
		}
		fmt.Printf("+%v allowed=%v remaining=%d retry_after=%v\n", at, d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// +0s allowed=true remaining=1 retry_after=0s
	// +0s allowed=true remaining=0 retry_after=0s
	// +0s allowed=false remaining=0 retry_after=500ms
	// +500ms allowed=true remaining=0 retry_after=0s
}

// Limiters sharing a store count apart: each one's keys are namespaced by
// its name, algorithm and limit.
func Example_sharedStore() {
	store := memstore.New(memstore.Options{})
	perMinute, _ := sluice.NewLimiter(store, sluice.TokenBucket, sluice.PerMinute(100))
	login, _ := sluice.NewLimiter(store, sluice.FixedWindow, sluice.PerMinute(3), sluice.WithName("login"))
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for range 4 {
		login.AllowAt(ctx, "user:42", now, 1)
	}
	d1, _ := login.AllowAt(ctx, "user:42", now, 1)
	d2, _ := perMinute.AllowAt(ctx, "user:42", now, 1)
	fmt.Println("login:", d1.Allowed, d1.Remaining)
	fmt.Println("per minute:", d2.Allowed, d2.Remaining)
	fmt.Println(login.Namespace(), perMinute.Namespace())
	// Output:
	// login: false 0
	// per minute: true 99
	// login|fixed_window,3/m| token_bucket,100/m|
}

// Per-plan quotas on one Limiter: the limit is chosen per call, and each
// limit counts apart.
func ExampleLimiter_AllowLimit() {
	lim, _ := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.SlidingWindowLog, sluice.PerHour(100))
	plans := map[string]sluice.Limit{"free": sluice.PerHour(2), "pro": sluice.PerHour(10_000)}
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, user := range []struct{ id, plan string }{{"ann", "free"}, {"ann", "free"}, {"ann", "free"}, {"bob", "pro"}} {
		d, _ := lim.AllowLimitAt(ctx, user.id, plans[user.plan], now, 1)
		fmt.Printf("%s (%s): allowed=%v remaining=%d\n", user.id, user.plan, d.Allowed, d.Remaining)
	}
	// Output:
	// ann (free): allowed=true remaining=1
	// ann (free): allowed=true remaining=0
	// ann (free): allowed=false remaining=0
	// bob (pro): allowed=true remaining=9999
}

// Changing the limit at run time starts fresh counts under the new limit;
// Reset forgets one key.
func ExampleLimiter_SetLimit() {
	lim, _ := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.GCRA, sluice.PerMinute(1))
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	lim.AllowAt(ctx, "k", now, 1)
	d, _ := lim.AllowAt(ctx, "k", now, 1)
	fmt.Println("1/m:", d.Allowed, d.RetryAfter)

	if err := lim.SetLimit(sluice.PerSecond(10)); err != nil {
		panic(err)
	}
	d, _ = lim.AllowAt(ctx, "k", now, 1)
	fmt.Println("10/s:", d.Allowed, d.Remaining)

	lim.Reset(ctx, "k")
	d, _ = lim.AllowAt(ctx, "k", now, 1)
	fmt.Println("after Reset:", d.Allowed, d.Remaining)
	// Output:
	// 1/m: false 1m0s
	// 10/s: true 9
	// after Reset: true 9
}

// A negative cost is a programming error, never a store outage: check for
// it apart from ErrStoreUnavailable.
func ExampleLimiter_AllowN_errors() {
	lim, _ := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.GCRA, sluice.PerSecond(1))
	_, err := lim.AllowN(context.Background(), "k", -1)
	fmt.Println(errors.Is(err, sluice.ErrInvalidCost), errors.Is(err, sluice.ErrStoreUnavailable))
	// Output:
	// true false
}

// Wait blocks until the request is admitted. One whose admission would
// come after the context's deadline returns at once, with an error
// wrapping context.DeadlineExceeded, having counted nothing. (A fixed
// clock keeps the output exact; real code leaves the clock alone.)
func ExampleLimiter_Wait() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	lim, _ := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.GCRA, sluice.PerMinute(1),
		sluice.WithClock(func() time.Time { return now }))
	ctx := context.Background()
	d, err := lim.Wait(ctx, "k") // the first is admitted at once
	fmt.Println("first:", d.Allowed, err)

	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	d, err = lim.Wait(ctx, "k") // the next is a minute away, past the deadline
	fmt.Println("second:", d.Allowed, d.RetryAfter, errors.Is(err, context.DeadlineExceeded))
	// Output:
	// first: true <nil>
	// second: false 1m0s true
}

// A cost known only once the work is done, such as the tokens of an LLM
// response, is reported: counted even past the limit, as debt that the
// key then waits out.
func ExampleLimiter_Report() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	lim, _ := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.TokenBucket, sluice.PerSecond(10),
		sluice.WithClock(func() time.Time { return now }))
	ctx := context.Background()
	d, _ := lim.Allow(ctx, "llm") // may the request start?
	fmt.Println("start:", d.Allowed)
	d, _ = lim.Report(ctx, "llm", 25) // it used 25 tokens
	fmt.Println("report 25:", d.Allowed, d.RetryAfter)
	now = now.Add(d.RetryAfter)
	d, _ = lim.Allow(ctx, "llm")
	fmt.Println("then:", d.Allowed)
	// Output:
	// start: true
	// report 25: false 1.7s
	// then: true
}
