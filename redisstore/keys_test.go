package redisstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

func TestKeyLayoutAndExpiry(t *testing.T) {
	srv := redistest.StartServer(t)
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}, Prefix: "t:", ExpiryMargin: 3 * time.Second})
	ctx := context.Background()
	if got, want := s.Key("user:42"), "t:{user:42}"; got != want {
		t.Fatalf("Key(user:42) = %q, want %q", got, want)
	}
	// 10/m token bucket, one taken at t0: full again 6 s later, so the key
	// expires in 6 s + the 3 s margin (relative to Redis' clock, whatever
	// the request's time).
	for _, at := range []time.Time{sluicetest.T0, time.Unix(1, 0), time.Unix(4_000_000_000, 0)} {
		k := "exp/" + strconv.FormatInt(at.Unix(), 10)
		if _, err := s.Take(ctx, sluice.Request{Key: k, Algorithm: sluice.TokenBucket, Limit: sluice.PerMinute(10), Cost: 1, Now: at}); err != nil {
			t.Fatal(err)
		}
		pttl, err := redistest.Do(srv.Addr, "PTTL", s.Key(k))
		if err != nil {
			t.Fatal(err)
		}
		ms, _ := strconv.Atoi(pttl)
		if ms <= 5000 || ms > 9000 {
			t.Errorf("PTTL %s after a take at %v = %s ms, want in (5000, 9000]: 6 s to rest + 3 s margin", s.Key(k), at, pttl)
		}
		// State "T N M": the last refill, the debt of one token (Period in
		// µs), unused.
		if got, err := redistest.Do(srv.Addr, "GET", s.Key(k)); err != nil || got != strconv.FormatInt(at.UnixMicro(), 10)+" 60000000 0" {
			t.Errorf("GET %s = %q, %v; want \"%d 60000000 0\"", s.Key(k), got, err, at.UnixMicro())
		}
	}
	// A request that leaves the key in the zero State (cost 0 on a fresh
	// sliding log) stores nothing.
	if _, err := s.Take(ctx, sluice.Request{Key: "rest", Algorithm: sluice.SlidingWindowLog, Limit: sluice.PerMinute(10), Cost: 0, Now: sluicetest.T0}); err != nil {
		t.Fatal(err)
	}
	if n, err := redistest.Do(srv.Addr, "EXISTS", s.Key("rest")); err != nil || n != "0" {
		t.Errorf("EXISTS %s after a cost-0 query = %q, %v; want 0", s.Key("rest"), n, err)
	}
	// Braces inside a user key stay distinct keys.
	for _, k := range []string{"a}b", "a}c", "{x}", ""} {
		if _, err := s.Take(ctx, sluice.Request{Key: k, Algorithm: sluice.FixedWindow, Limit: sluice.PerMinute(1), Cost: 1, Now: sluicetest.T0}); err != nil {
			t.Fatalf("Take(%q): %v", k, err)
		}
	}
	for _, k := range []string{"a}b", "a}c", "{x}", ""} {
		d, err := s.Take(ctx, sluice.Request{Key: k, Algorithm: sluice.FixedWindow, Limit: sluice.PerMinute(1), Cost: 1, Now: sluicetest.T0})
		if err != nil || d.Allowed {
			t.Errorf("second Take(%q) = %+v, %v; want denied (its own count of 1)", k, d, err)
		}
	}
}

func TestRedisTime(t *testing.T) {
	srv := redistest.StartServer(t)
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}, RedisTime: true})
	ctx := context.Background()
	l := sluice.PerHour(2)
	// Request.Now is ignored: wildly different caller clocks share one count.
	var allowed int
	for _, at := range []time.Time{time.Unix(0, 0), time.Unix(4_000_000_000, 0), sluicetest.T0, time.Unix(1, 0)} {
		d, err := s.Take(ctx, sluice.Request{Key: "rt", Algorithm: sluice.SlidingWindowLog, Limit: l, Cost: 1, Now: at})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			allowed++
		} else if d.RetryAfter <= 59*time.Minute || d.RetryAfter > time.Hour {
			t.Errorf("Take at caller time %v: RetryAfter %v, want just under an hour of Redis time", at, d.RetryAfter)
		}
	}
	if allowed != 2 {
		t.Errorf("admitted %d of 4 requests at caller times 70 years apart, want 2 (Redis' clock decides)", allowed)
	}
	// The log holds Redis' time: within a minute of this machine's clock.
	tv, err := redistest.Do(srv.Addr, "HGET", s.Key("rt"), "t0")
	if err != nil {
		t.Fatal(err)
	}
	us, _ := strconv.ParseInt(tv, 10, 64)
	if d := time.Since(time.UnixMicro(us)); d < -time.Minute || d > time.Minute {
		t.Errorf("logged time %s is %v from now, want Redis' current time", tv, d)
	}
}
