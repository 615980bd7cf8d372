package sluicetest

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// testReport: a forced charge (Request.Force) past the limit is counted as
// debt: requests are refused until RetryAfter, which for the buckets is the
// overage drained at the rate, and admitted from then on. A forced charge
// that fits decides as Take.
func testReport(t *testing.T, s sluice.Store) {
	ctx := context.Background()
	l := sluice.PerSecond(10)
	for _, alg := range sluice.Algorithms() {
		key := uniq(t, alg.String())
		// 30 units against a capacity of 10 (11 for the leaky bucket).
		d, err := s.Take(ctx, sluice.Request{Key: key, Algorithm: alg, Limit: l, Cost: 30, Now: T0, Force: true})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed || d.Remaining != 0 || d.RetryAfter <= 0 {
			t.Fatalf("%s: a report of 30 against 10/s = %+v, want not Allowed (over), Remaining 0 and a finite RetryAfter", alg, d)
		}
		want := map[sluice.Algorithm]time.Duration{
			// 30 tokens of debt against a bucket of 10: 21 must drain at
			// 10/s before one more fits.
			sluice.TokenBucket: 2100 * time.Millisecond, sluice.GCRA: 2100 * time.Millisecond,
			// 30 spacings queued, 10 may wait: 21 spacings.
			sluice.LeakyBucket: 2100 * time.Millisecond,
			// The count stays over the rate until the window ends; the log's
			// entries leave the window after a period.
			sluice.FixedWindow: time.Second, sluice.SlidingWindowLog: time.Second,
		}
		if w, ok := want[alg]; ok && d.RetryAfter != w {
			t.Fatalf("%s: RetryAfter after a report of 30 against 10/s = %v, want %v", alg, d.RetryAfter, w)
		}
		retry := d.RetryAfter
		for _, at := range []time.Duration{0, time.Microsecond, (retry / 2).Truncate(time.Microsecond), retry - time.Microsecond} {
			d, err := s.Take(ctx, sluice.Request{Key: key, Algorithm: alg, Limit: l, Cost: 1, Now: T0.Add(at)})
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				t.Fatalf("%s: a request %v after a report of 30 against 10/s was admitted; the debt lasts %v", alg, at, retry)
			}
			if got := at + d.RetryAfter; got != retry {
				t.Fatalf("%s: at t0+%v RetryAfter %v points to t0+%v, want t0+%v", alg, at, d.RetryAfter, got, retry)
			}
		}
		if d, err := s.Take(ctx, sluice.Request{Key: key, Algorithm: alg, Limit: l, Cost: 1, Now: T0.Add(retry)}); err != nil || !d.Allowed {
			t.Fatalf("%s: at t0+%v, when the debt has drained, Take = %+v, %v; want admitted", alg, retry, d, err)
		}

		// A report that fits is Take's decision, and counted.
		a, b := uniq(t, alg.String()+"/fit-a"), uniq(t, alg.String()+"/fit-b")
		for i := range 3 {
			now := T0.Add(time.Duration(i) * time.Millisecond)
			da, err1 := s.Take(ctx, sluice.Request{Key: a, Algorithm: alg, Limit: l, Cost: 2, Now: now, Force: true})
			db, err2 := s.Take(ctx, sluice.Request{Key: b, Algorithm: alg, Limit: l, Cost: 2, Now: now})
			if err1 != nil || err2 != nil || da != db || !da.Allowed {
				t.Fatalf("%s: a fitting report #%d = %+v (%v), Take = %+v (%v); want the same admitted decision", alg, i, da, err1, db, err2)
			}
		}
	}
}

// testTakeAllReport: in TakeAll a forced request past its limit does not
// make the others fail, and is counted with them; when another request is
// denied, nothing is counted, the forced one included.
func testTakeAllReport(t *testing.T, s sluice.Store) {
	ctx := context.Background()
	for _, alg := range sluice.Algorithms() {
		a, b := uniq(t, alg.String()+"/a"), uniq(t, alg.String()+"/b")
		wide, narrow := sluice.PerMinute(10), sluice.PerMinute(1)
		bcost := int64(1)
		if alg == sluice.LeakyBucket {
			bcost = 2 // the whole queue of 1/m: Burst+1
		}
		rs := []sluice.Request{
			{Key: a, Algorithm: alg, Limit: wide, Cost: 25, Now: T0, Force: true},
			{Key: b, Algorithm: alg, Limit: narrow, Cost: bcost, Now: T0},
		}
		ds := make([]sluice.Decision, 2)
		if err := s.TakeAll(ctx, rs, ds); err != nil {
			t.Fatal(err)
		}
		if ds[0].Allowed || !ds[1].Allowed {
			t.Fatalf("%s: TakeAll(report 25 against 10/m, 1 against 1/m) = %+v, want the report over and the other admitted", alg, ds)
		}
		if d, err := s.Take(ctx, sluice.Request{Key: b, Algorithm: alg, Limit: narrow, Cost: bcost, Now: T0}); err != nil || d.Allowed {
			t.Fatalf("%s: the 1/m limit after TakeAll admitted again (%+v, %v): TakeAll did not count it", alg, d, err)
		}
		if d, err := s.Take(ctx, sluice.Request{Key: a, Algorithm: alg, Limit: wide, Cost: 1, Now: T0}); err != nil || d.Allowed {
			t.Fatalf("%s: after a report of 25 against 10/m a request was admitted (%+v, %v): the report was not counted", alg, d, err)
		}

		// b is now spent: a TakeAll with a fitting report on a fresh key
		// and b is denied by b, and counts nothing.
		c := uniq(t, alg.String()+"/c")
		rs[0] = sluice.Request{Key: c, Algorithm: alg, Limit: wide, Cost: 4, Now: T0, Force: true}
		if err := s.TakeAll(ctx, rs, ds); err != nil {
			t.Fatal(err)
		}
		if ds[1].Allowed {
			t.Fatalf("%s: TakeAll = %+v, want the 1/m limit to deny", alg, ds)
		}
		d, err := s.Take(ctx, sluice.Request{Key: c, Algorithm: alg, Limit: wide, Cost: 0, Now: T0})
		if err != nil {
			t.Fatal(err)
		}
		if full := wide.Rate + map[bool]int64{true: 1}[alg == sluice.LeakyBucket]; d.Remaining != full {
			t.Fatalf("%s: after a denied TakeAll the reported key has Remaining %d, want %d: nothing may be counted", alg, d.Remaining, full)
		}
	}
}
