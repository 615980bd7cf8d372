package deferq_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// gated is a Queue on a Redis of its own, delivering to up, whose rule
// "big" (bodies up to 512 KiB) lets no request go (take) until open is
// set.
type gated struct {
	q    *deferq.Queue
	c    rueidis.Client
	up   *upstream
	open atomic.Bool
	take func(context.Context, []string) (sluice.Decision, error)
}

func newGated(t *testing.T, maxHeld int64) *gated {
	t.Helper()
	srv := redistest.StartServer(t)
	g := &gated{up: newUpstream(t, nil), c: client(t, srv.Addr)}
	q, err := newQueue(deferq.Options{Client: g.c, Upstream: mustURL(t, g.up.srv.URL), MaxHeldBytes: maxHeld})
	if err != nil {
		t.Fatal(err)
	}
	g.q = q
	g.take = func(context.Context, []string) (sluice.Decision, error) {
		if g.open.Load() {
			return sluice.Decision{Allowed: true}, nil
		}
		return sluice.Decision{RetryAfter: 50 * time.Millisecond}, nil
	}
	q.SetRules([]deferq.Rule{{Name: "big", MaxBodyBytes: 512 << 10, Take: g.take}})
	return g
}

// pending returns how many entries of rule's stream are read and not
// settled (XPENDING's summary), or -1 if Redis does not say.
func pending(c rueidis.Client, rule string) int64 {
	stream := deferq.DefaultPrefix + "{" + deferq.Tag(rule) + "}:q"
	v, err := c.Do(context.Background(), c.B().Xpending().Key(stream).Group("sluice").Build()).ToArray()
	if err != nil || len(v) == 0 {
		return -1
	}
	k, _ := v[0].AsInt64()
	return k
}
