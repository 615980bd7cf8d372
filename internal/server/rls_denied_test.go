package server_test

import (
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/redisstore"
)

// TestDeniedRequestReportsUncountedRemaining: when one descriptor denies
// the request, the others are not counted (denied traffic consumes
// nothing), so their limit_remaining must be what is really left, as a
// check with hits_addend 0 reads it afterwards, not what would have been
// left had the request been counted. On every algorithm and store, with a
// descriptor repeated in the request too.
func TestDeniedRequestReportsUncountedRemaining(t *testing.T) {
	t.Parallel() // a store (a Cluster's start, for the cluster kind) and a service of its own
	algs := []string{"fixed_window", "sliding_window_log", "sliding_window_counter", "token_bucket", "leaky_bucket", "gcra"}
	conf := "domain: d\ndescriptors:\n  - key: one\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"
	for _, a := range algs {
		conf += fmt.Sprintf("  - key: %s\n    algorithm: %s\n    rate_limit: {unit: minute, requests_per_unit: 10}\n", a, a)
	}
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			e := startRLS(t, newStore(t, kind), writeConf(t, conf), envOpts{})
			for _, a := range algs {
				user := "u-" + a
				// Counted: 3 hits on the algorithm's limit, 1 on one.
				if r := e.call(t, "d", 0, withHits(desc(a, user), 3), desc("one", user)); codesOf(r) != "O:OO" {
					t.Fatalf("%s: first request %s, want O:OO", a, codesOf(r))
				}
				want := e.remaining(t, "d", a, user)
				if want > 7 && a != "leaky_bucket" { // the leaky bucket's is its queue's room
					t.Fatalf("%s: remaining after 3 of 10 = %d, want at most 7", a, want)
				}
				// Denied by one: nothing counted.
				r := e.call(t, "d", 0, withHits(desc(a, user), 2), desc("one", user))
				if codesOf(r) != "X:OX" {
					t.Fatalf("%s: second request %s, want X:OX", a, codesOf(r))
				}
				if got := e.remaining(t, "d", a, user); got != want {
					t.Fatalf("%s: the denied request counted: remaining %d, want %d", a, got, want)
				}
				if got := r.Statuses[0].LimitRemaining; got != want {
					t.Errorf("%s: denied request's limit_remaining = %d, want %d (nothing was counted)", a, got, want)
				}
				// The same descriptor twice, in a denied request.
				r = e.call(t, "d", 0, withHits(desc(a, user), 2), withHits(desc(a, user), 3), desc("one", user))
				if codesOf(r) != "X:OOX" {
					t.Fatalf("%s: repeated descriptor %s, want X:OOX", a, codesOf(r))
				}
				for i := range 2 {
					if got := r.Statuses[i].LimitRemaining; got != want {
						t.Errorf("%s: repeated descriptor, status %d limit_remaining = %d, want %d", a, i, got, want)
					}
				}
			}
		})
	}
}

// TestDeniedRequestReportsUncountedRemainingSharded: the same for a
// descriptor split over shards (shards: 3, 10 of 30 each), whose figure is
// its shard's scaled by 3. Shards are taken in turn: the first request
// counts 3 on shard 0, the denied one asks shard 1 (untouched), the check
// after it shard 2 (untouched): 30 left, as the denied request must say.
func TestDeniedRequestReportsUncountedRemainingSharded(t *testing.T) {
	t.Parallel() // a store (a Cluster's start, for the cluster kind) and a service of its own
	const conf = `domain: d
descriptors:
  - key: one
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: sharded
    shards: 3
    rate_limit: {unit: minute, requests_per_unit: 30}
`
	for _, kind := range []string{"redis", "cluster"} {
		t.Run(kind, func(t *testing.T) {
			st := newStore(t, kind).(*redisstore.Store)
			e := startRLS(t, st, writeConf(t, conf), envOpts{shard: st.Shard})
			r := e.call(t, "d", 0, withHits(desc("sharded", "s"), 3), desc("one", "s"))
			if codesOf(r) != "O:OO" || r.Statuses[0].LimitRemaining != 21 {
				t.Fatalf("first request: %s %v, want O:OO with 21 (7 of shard 0's 10, × 3) left", codesOf(r), r.Statuses)
			}
			r = e.call(t, "d", 0, withHits(desc("sharded", "s"), 2), desc("one", "s"))
			if codesOf(r) != "X:OX" {
				t.Fatalf("second request %s, want X:OX", codesOf(r))
			}
			if got := r.Statuses[0].LimitRemaining; got != 30 {
				t.Errorf("denied request's limit_remaining on an untouched shard = %d, want 30 (nothing was counted)", got)
			}
			if got := e.remaining(t, "d", "sharded", "s"); got != 30 {
				t.Errorf("check on the third shard: %d left, want 30", got)
			}
		})
	}
}

// TestDeniedRequestFromOverLimitCache: the daemon's Redis store sits behind
// the over-limit cache, which refuses a request whose key is known to be
// over without asking Redis and reports the other descriptors allowed with
// nothing known of them. Their limit_remaining must then not be made up:
// what is left when Redis was asked, else nothing (0), never a figure of
// neither.
func TestDeniedRequestFromOverLimitCache(t *testing.T) {
	t.Parallel() // a store (a Cluster's start, for the cluster kind) and a service of its own
	const conf = `domain: d
descriptors:
  - key: one
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: ten
    rate_limit: {unit: minute, requests_per_unit: 10}
`
	for _, kind := range []string{"memory", "redis"} {
		t.Run(kind, func(t *testing.T) {
			e := startRLS(t, fleet.NewOverLimitCache(newStore(t, kind), fleet.OverLimitOptions{}), writeConf(t, conf), envOpts{})
			if r := e.call(t, "d", 0, withHits(desc("ten", "u"), 3), desc("one", "u")); codesOf(r) != "O:OO" {
				t.Fatalf("first request %s, want O:OO", codesOf(r))
			}
			// Asked: the store refuses one, and is remembered.
			r := e.call(t, "d", 0, withHits(desc("ten", "u"), 2), desc("one", "u"))
			if codesOf(r) != "X:OX" || r.Statuses[0].LimitRemaining != 7 {
				t.Fatalf("second request (the store asked): %s %v, want X:OX with 7 left", codesOf(r), r.Statuses)
			}
			// From the cache: ten was not asked.
			r = e.call(t, "d", 0, withHits(desc("ten", "u"), 2), desc("one", "u"))
			if codesOf(r) != "X:OX" {
				t.Fatalf("third request (from the cache): %s, want X:OX", codesOf(r))
			}
			if got := r.Statuses[0].LimitRemaining; got != 7 && got != 0 {
				t.Errorf("third request: ten's limit_remaining = %d, want 7 or 0 (not asked), not a figure of neither", got)
			}
			if got := e.remaining(t, "d", "ten", "u"); got != 7 {
				t.Errorf("ten remaining = %d, want 7: denied requests count nothing", got)
			}
		})
	}
}
