package sluicetest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// testKeyTaker runs the decision tests again through the store's
// sluice.KeyTaker fast path, when it has one: every other call goes through
// TakeKey instead of Take, on the same keys, so the two must share their
// state and decide alike.
func testKeyTaker(t *testing.T, open func(t *testing.T) sluice.Store) {
	if s := open(t); !implementsKeyTaker(s) {
		t.Skipf("%T does not implement sluice.KeyTaker", s)
	}
	via := func(t *testing.T) sluice.Store {
		s := open(t)
		return &viaKeyTaker{Store: s, kt: s.(sluice.KeyTaker), t: t}
	}
	t.Run("Tables", func(t *testing.T) {
		for _, tb := range Tables() {
			t.Run(tb.Name, func(t *testing.T) { RunTable(t, via(t), tb) })
		}
	})
	t.Run("Differential", func(t *testing.T) { testDifferential(t, via(t)) })
	t.Run("Errors", func(t *testing.T) { testErrors(t, via(t)) })
	t.Run("ReportCarriesDebt", func(t *testing.T) { testReport(t, via(t)) })
	t.Run("NamespacesApart", func(t *testing.T) { testNamespaces(t, via(t)) })
}

func implementsKeyTaker(s sluice.Store) bool {
	_, ok := s.(sluice.KeyTaker)
	return ok
}

// viaKeyTaker is a Store whose Take alternates between the store's Take
// and its TakeKey. TakeKey gets a Request whose own Key, Cost and Now are
// wrong (TakeKey must decide for the key, cost and instant it is given),
// and must leave that Request as it found it.
type viaKeyTaker struct {
	sluice.Store
	kt sluice.KeyTaker
	t  *testing.T
	n  atomic.Uint64
}

func (v *viaKeyTaker) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	if v.n.Add(1)%2 == 0 {
		return v.Store.Take(ctx, r)
	}
	q := r
	q.Key, q.Cost, q.Now = r.Key+"/not-this-key", r.Cost+1, r.Now.Add(time.Hour)
	before := q
	ok, rem, retry, reset, delay, err := v.kt.TakeKey(ctx, &q, r.Key, r.Cost, r.Now)
	if q != before {
		v.t.Errorf("TakeKey changed the Request it was given: %+v, was %+v", q, before)
	}
	if err != nil {
		return sluice.Decision{}, err
	}
	return sluice.Decision{Allowed: ok, Limit: r.Limit.Rate, Remaining: rem, RetryAfter: retry, ResetAfter: reset, Delay: delay}, err
}
