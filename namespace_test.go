package sluice_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestLimitersSharingAStoreCountApart is the trap: a 100/min token
// bucket and a 3/min fixed window on one store and one key.
func TestLimitersSharingAStoreCountApart(t *testing.T) {
	ctx := context.Background()
	store := memstore.New(memstore.Options{})
	clk := sluicetest.NewClock(sluicetest.T0)
	wide, err := sluice.NewLimiter(store, sluice.TokenBucket, sluice.PerMinute(100), sluice.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	narrow, err := sluice.NewLimiter(store, sluice.FixedWindow, sluice.PerMinute(3), sluice.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if d, err := narrow.Allow(ctx, "k"); err != nil || !d.Allowed || d.Remaining != int64(2-i) {
			t.Fatalf("narrow #%d: %+v, %v", i, d, err)
		}
		if d, err := wide.Allow(ctx, "k"); err != nil || !d.Allowed || d.Remaining != int64(99-i) {
			t.Fatalf("wide #%d: %+v, %v", i, d, err)
		}
	}
	if d, _ := narrow.Allow(ctx, "k"); d.Allowed || d.Remaining != 0 {
		t.Fatalf("narrow #4: %+v, want denied with 0 remaining", d)
	}
	if d, _ := wide.Allow(ctx, "k"); !d.Allowed || d.Remaining != 96 {
		t.Fatalf("wide #4: %+v, want allowed with 96 remaining", d)
	}
}

// TestChangedLimitStartsFresh: a key that spent 10/min and meets 1/s is
// not told to wait minutes; changing back finds the old count.
func TestChangedLimitStartsFresh(t *testing.T) {
	ctx := context.Background()
	store := memstore.New(memstore.Options{})
	clk := sluicetest.NewClock(sluicetest.T0)
	lim, _ := sluice.NewLimiter(store, sluice.GCRA, sluice.PerMinute(10), sluice.WithClock(clk.Now))
	for range 10 {
		lim.Allow(ctx, "k")
	}
	if d, _ := lim.Allow(ctx, "k"); d.Allowed {
		t.Fatal("11th request under 10/min allowed")
	}
	if err := lim.SetLimit(sluice.PerSecond(1)); err != nil {
		t.Fatal(err)
	}
	if got := lim.Limit(); got != sluice.PerSecond(1) {
		t.Fatalf("Limit() after SetLimit = %v", got)
	}
	if d, _ := lim.Allow(ctx, "k"); !d.Allowed {
		t.Fatalf("first request under the new 1/s: %+v, want allowed", d)
	}
	if d, _ := lim.Allow(ctx, "k"); d.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("second request under 1/s: %+v, want denied, retry in 1s", d)
	}
	// A new Limiter with the old limit (a redeploy back) finds the old count.
	old, _ := sluice.NewLimiter(store, sluice.GCRA, sluice.PerMinute(10), sluice.WithClock(clk.Now))
	if d, _ := old.Allow(ctx, "k"); d.Allowed {
		t.Fatalf("back to 10/min: %+v, want the old count (denied)", d)
	}
	if err := lim.SetLimit(sluice.Limit{}); !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Fatalf("SetLimit(zero) = %v, want ErrInvalidLimit", err)
	}
}

// TestNamesCountApart: same algorithm and limit, different names.
func TestNamesCountApart(t *testing.T) {
	ctx := context.Background()
	store := memstore.New(memstore.Options{})
	a, _ := sluice.NewLimiter(store, sluice.FixedWindow, sluice.PerMinute(1), sluice.WithName("login"))
	b, _ := sluice.NewLimiter(store, sluice.FixedWindow, sluice.PerMinute(1), sluice.WithName("signup"))
	same, _ := sluice.NewLimiter(store, sluice.FixedWindow, sluice.PerMinute(1), sluice.WithName("login"))
	now := sluicetest.T0
	if d, _ := a.AllowAt(ctx, "k", now, 1); !d.Allowed {
		t.Fatal("login #1 denied")
	}
	if d, _ := b.AllowAt(ctx, "k", now, 1); !d.Allowed {
		t.Fatal("signup #1 denied: it shares login's count")
	}
	if d, _ := same.AllowAt(ctx, "k", now, 1); d.Allowed {
		t.Fatal("a second login limiter did not share the first's count")
	}
	if _, err := sluice.NewLimiter(store, sluice.GCRA, sluice.PerSecond(1), sluice.WithName("a|b")); err == nil {
		t.Error("name with '|' accepted")
	}
}

func TestNamespace(t *testing.T) {
	store := memstore.New(memstore.Options{})
	for _, c := range []struct {
		name string
		alg  sluice.Algorithm
		lim  sluice.Limit
		want string
	}{
		{"", sluice.TokenBucket, sluice.PerMinute(100), "token_bucket,100/m|"},
		{"api", sluice.TokenBucket, sluice.PerMinute(100).WithBurst(100), "api|token_bucket,100/m|"},
		{"api", sluice.TokenBucket, sluice.PerMinute(100).WithBurst(200), "api|token_bucket,100/m,burst=200|"},
		{"", sluice.SlidingWindowCounter, sluice.Every(10, 250*time.Millisecond).WithSegments(5), "sliding_window_counter,10/250ms,segments=5|"},
		{"", sluice.FixedWindow, sluice.PerMinute(5).WithSegments(1), "fixed_window,5/m|"},
	} {
		l, err := sluice.NewLimiter(store, c.alg, c.lim, sluice.WithName(c.name))
		if err != nil {
			t.Fatal(err)
		}
		if got := l.Namespace(); got != c.want {
			t.Errorf("Namespace(%q, %v, %+v) = %q, want %q", c.name, c.alg, c.lim, got, c.want)
		}
	}
}

// TestPerCallLimits: per-plan quotas on one Limiter.
func TestPerCallLimits(t *testing.T) {
	ctx := context.Background()
	lim, _ := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.FixedWindow, sluice.PerHour(2))
	free, pro := sluice.PerHour(1), sluice.PerHour(3)
	now := sluicetest.T0
	for i, want := range []bool{true, false} {
		if d, err := lim.AllowLimitAt(ctx, "alice", free, now, 1); err != nil || d.Allowed != want || d.Limit != 1 {
			t.Fatalf("free #%d: %+v, %v", i, d, err)
		}
	}
	for i, want := range []bool{true, true, true, false} {
		if d, err := lim.AllowLimitAt(ctx, "bob", pro, now, 1); err != nil || d.Allowed != want || d.Limit != 3 {
			t.Fatalf("pro #%d: %+v, %v", i, d, err)
		}
	}
	if _, err := lim.AllowLimitAt(ctx, "bob", sluice.Limit{Rate: 1}, now, 1); !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Fatalf("invalid per-call limit: %v, want ErrInvalidLimit", err)
	}
	// Reset under a per-call limit.
	if err := lim.ResetLimit(ctx, "alice", free); err != nil {
		t.Fatal(err)
	}
	if d, _ := lim.AllowLimitAt(ctx, "alice", free, now, 1); !d.Allowed {
		t.Fatal("alice denied after ResetLimit")
	}
}

func TestReset(t *testing.T) {
	ctx := context.Background()
	lim, _ := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.SlidingWindowLog, sluice.PerHour(1))
	now := sluicetest.T0
	lim.AllowAt(ctx, "k", now, 1)
	if d, _ := lim.AllowAt(ctx, "k", now, 1); d.Allowed {
		t.Fatal("second request allowed")
	}
	if err := lim.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if d, _ := lim.AllowAt(ctx, "k", now, 1); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("after Reset: %+v, want allowed", d)
	}
	// A store that cannot reset says so.
	plain, _ := sluice.NewLimiter(storeOnly{memstore.New(memstore.Options{})}, sluice.GCRA, sluice.PerHour(1))
	if err := plain.Reset(ctx, "k"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Reset on a store without Resetter = %v, want errors.ErrUnsupported", err)
	}
}

type storeOnly struct{ sluice.Store }

// TestNegativeCost is a programming error, never a store failure, and
// nothing reaches the store.
func TestNegativeCost(t *testing.T) {
	ctx := context.Background()
	lim, _ := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.FixedWindow, sluice.PerMinute(1))
	_, err := lim.AllowN(ctx, "k", -1)
	if !errors.Is(err, sluice.ErrInvalidCost) || errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Fatalf("AllowN(-1) = %v, want ErrInvalidCost and not ErrStoreUnavailable", err)
	}
	if _, err := lim.AllowLimit(ctx, "k", sluice.PerHour(1), -5); !errors.Is(err, sluice.ErrInvalidCost) {
		t.Fatalf("AllowLimit(-5) = %v, want ErrInvalidCost", err)
	}
	if d, _ := lim.Allow(ctx, "k"); !d.Allowed {
		t.Fatal("the negative cost was counted")
	}
}

// TestZeroLimiter: the zero value returns an error, never panics.
func TestZeroLimiter(t *testing.T) {
	var l sluice.Limiter
	ctx := context.Background()
	if _, err := l.Allow(ctx, "k"); err == nil {
		t.Error("zero Limiter Allow: no error")
	}
	if _, err := l.AllowLimit(ctx, "k", sluice.PerSecond(1), 1); err == nil {
		t.Error("zero Limiter AllowLimit: no error")
	}
	if err := l.Reset(ctx, "k"); err == nil {
		t.Error("zero Limiter Reset: no error")
	}
	if err := l.SetLimit(sluice.PerSecond(1)); err == nil {
		t.Error("zero Limiter SetLimit: no error")
	}
	if l.Limit() != (sluice.Limit{}) || l.Namespace() != "" {
		t.Error("zero Limiter has a limit")
	}
}

func TestSetLimitConcurrent(t *testing.T) {
	ctx := context.Background()
	lim, _ := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.GCRA, sluice.PerSecond(100))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			lim.SetLimit(sluice.PerSecond(int64(100 + i%3)))
		}
	}()
	for range 200 {
		if _, err := lim.Allow(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	<-done
}
