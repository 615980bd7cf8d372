package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestRefundRedisTime: with Redis' clock, a refund is given back at
// Redis' now, whatever Request.Now says: a key refused at its limit
// admits again what was given back.
func TestRefundRedisTime(t *testing.T) {
	srv := redistest.StartServer(t)
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}, RedisTime: true})
	ctx := context.Background()
	for _, alg := range sluice.Algorithms() {
		r := sluice.Request{Key: fmt.Sprintf("give/%d/%v", time.Now().UnixNano(), alg), Algorithm: alg, Limit: sluice.PerHour(2), Cost: 1, Now: sluicetest.T0}
		for i := 0; ; i++ {
			d, err := s.Take(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed {
				break
			}
			if i > 5 {
				t.Fatalf("%v: take #%d admitted, want refused at the limit", alg, i)
			}
		}
		// A Now an hour away from Redis' is not read.
		q := r
		q.Now = sluicetest.T0.Add(-time.Hour)
		d, err := s.Refund(ctx, q)
		if err != nil || d.Remaining != 1 {
			t.Fatalf("%v: Refund(1) at the limit = %+v, %v; want Remaining 1", alg, d, err)
		}
		if d, err := s.Take(ctx, r); err != nil || !d.Allowed {
			t.Fatalf("%v: Take after Refund(1) = %+v, %v; want admitted", alg, d, err)
		}
	}
}

// TestRefundRedisDown: a refund that cannot reach Redis fails with
// ErrStoreUnavailable, within the timeout.
func TestRefundRedisDown(t *testing.T) {
	srv := redistest.StartServer(t)
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}, Timeout: upTimeout})
	if _, err := s.Refund(context.Background(), req("down", 0)); err != nil {
		t.Fatalf("Refund with Redis up: %v", err)
	}
	srv.Stop()
	mustFailFast(t, "Refund with Redis stopped", upTimeout, func() error {
		_, err := s.Refund(context.Background(), req("down", 0))
		return err
	})
}
