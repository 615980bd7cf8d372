package daemon

import (
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/redistest"
)

// Two daemons over one Redis (and one Cluster): B's over-limit cache
// remembers a refusal of a per-year descriptor; A gets negative hits for
// it; B then admits the request the units came back for. B used to
// refuse it from its cache until the refusal's end (here, a year), since
// only the cache of the instance that gave back forgot it. Each wait is
// for a condition (B's cache answering; B admitting), failing after a
// minute.
func TestEnvoyNegativeHitsReachOtherInstance(t *testing.T) {
	t.Parallel() // a Cluster (or Redis) and daemons of its own
	for _, kind := range []string{"redis", "cluster"} {
		t.Run(kind, func(t *testing.T) {
			store := storeBlock(t, kind)
			a, b := startEnvoyDaemon(t, store), startEnvoyDaemon(t, store)
			ask := func(ed *envoyDaemon) rlsv3.RateLimitResponse_Code {
				return ed.ask("shop", entries("tenant", "acme", "user", "neg")).OverallCode
			}
			for i := range 3 {
				if c := ask(b); c != rlsv3.RateLimitResponse_OK {
					t.Fatalf("B: request %d: %v; want OK", i+1, c)
				}
			}
			// Until B's cache answers (it is paused until subscribed).
			deadline := time.Now().Add(time.Minute)
			for b.metric("sluice_overlimit_cache_hits_total") == 0 {
				if c := ask(b); c != rlsv3.RateLimitResponse_OVER_LIMIT {
					t.Fatalf("B: request over the limit: %v; want OVER_LIMIT", c)
				}
				if time.Now().After(deadline) {
					t.Fatal("B's over-limit cache never answered")
				}
				time.Sleep(time.Millisecond)
			}
			neg := entries("tenant", "acme", "user", "neg")
			neg.HitsAddend = wrapperspb.UInt64(1)
			neg.IsNegativeHits = true
			if c := a.ask("shop", neg).OverallCode; c != rlsv3.RateLimitResponse_OK {
				t.Fatalf("A: negative hits: %v; want OK", c)
			}
			hits := b.metric("sluice_overlimit_cache_hits_total")
			for ask(b) != rlsv3.RateLimitResponse_OK {
				if time.Now().After(deadline) {
					t.Fatalf("B still refuses the unit A gave back (its cache answered %v times since)", b.metric("sluice_overlimit_cache_hits_total")-hits)
				}
				time.Sleep(time.Millisecond)
			}
			if c := ask(b); c != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("B: after the unit given back was used: %v; want OVER_LIMIT", c)
			}
		})
	}
}

// A Redis user without the refunds' channel (Redis 7 gives new users
// none) is a startup error naming PUBLISH and SUBSCRIBE on it: the
// daemon's refunds publish there and its over-limit cache subscribes.
// With the channel granted, it starts.
func TestRedisACLRefundChannel(t *testing.T) {
	addr := redistest.StartServer(t).Addr
	for _, u := range [][]string{{"nochan", "resetchannels"}, {"chan", "resetchannels", "&sluice:refunds"}} {
		args := append([]string{"ACL", "SETUSER", u[0], "on", ">pw", "~sluice:*", "+@all"}, u[1:]...)
		if _, err := redistest.Do(addr, args...); err != nil {
			t.Fatal(err)
		}
	}
	err := newWith(t, needsConfig([]string{addr}, false, "nochan"))
	for _, w := range []string{"PUBLISH on the channel sluice:refunds", "SUBSCRIBE on the channel sluice:refunds (for the over-limit cache", `user "nochan"`} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("New with user nochan: %v; want an error naming %q", err, w)
		}
	}
	if err := newWith(t, needsConfig([]string{addr}, false, "chan")); err != nil {
		t.Errorf("New with user chan (&sluice:refunds): %v; want started", err)
	}
}
