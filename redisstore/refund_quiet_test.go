package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestRefundPublishesOnlyWhatItGave: with PublishRefunds, Store.Refund
// publishes its key when it leaves the key counting less, under every
// algorithm, and not when it gave nothing back: a refund of cost 0, one
// to a key that counted nothing, or one after the window it counted in
// has gone (the bucket refilled): the other instances' caches have
// nothing to forget. It used to publish every time.
func TestRefundPublishesOnlyWhatItGave(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}, PublishRefunds: true})
	t0 := sluicetest.T0
	for _, alg := range sluice.Algorithms() {
		req := func(key string, cost int64, at time.Time) sluice.Request {
			return sluice.Request{Namespace: "api", Key: alg.String() + ":" + key, Algorithm: alg, Limit: sluice.PerMinute(10), Cost: cost, Now: at}
		}
		for _, c := range []struct {
			name  string
			taken int64     // cost taken at t0 first
			cost  int64     // refunded
			at    time.Time // when
			want  int64     // PUBLISH calls
		}{
			{"cost 0", 1, 0, t0, 0},
			{"nothing counted", 0, 1, t0, 0},
			{"window gone", 1, 1, t0.Add(time.Hour), 0},
			{"a unit given back", 1, 1, t0, 1},
		} {
			key := c.name
			if c.taken > 0 {
				if d, err := s.Take(ctx, req(key, c.taken, t0)); err != nil || !d.Allowed {
					t.Fatalf("%v, %s: Take = %+v, %v", alg, c.name, d, err)
				}
			}
			before := calls(t, srv.Addr, "publish")
			if _, err := s.Refund(ctx, req(key, c.cost, c.at)); err != nil {
				t.Fatalf("%v, %s: Refund: %v", alg, c.name, err)
			}
			if got := calls(t, srv.Addr, "publish") - before; got != c.want {
				t.Errorf("%v, %s: the refund ran %d PUBLISH; want %d", alg, c.name, got, c.want)
			}
		}
	}
}
