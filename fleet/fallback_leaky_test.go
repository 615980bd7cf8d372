package fleet_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// leakyStep is a step of a trace on one leaky bucket key: a Take, a report
// (a forced Take), a TakeAll of reports, or a Refund, at t0+at.
type leakyStep struct {
	op   string // "take", "report", "reports", "refund"
	at   time.Duration
	cost []int64 // one cost; for "reports", one per report in the TakeAll
}

// TestFallbackRefundLeakyReport: a report (a forced charge) past a leaky
// bucket's queue on an idle key joins it one spacing more than its cost
// (see sluice.Algorithm.Charge), and a refund gives that spacing back as
// any other unit. In local mode, a Fallback decides as memory does, the
// Reference: before, it gave back to memory only the units it had noted,
// the report's cost, and the key stayed a spacing behind (found by the
// refund differential, seed 1795897512024247160: the first trace).
func TestFallbackRefundLeakyReport(t *testing.T) {
	ctx := context.Background()
	l := sluice.Every(5, 250*time.Millisecond).WithBurst(2) // a spacing of 50 ms
	ms := time.Millisecond
	one := func(c int64) []int64 { return []int64{c} }
	for _, tc := range []struct {
		name  string
		steps []leakyStep
	}{
		{"seed 1795897512024247160", []leakyStep{
			{"report", 5216994 * time.Microsecond, one(7)},
			{"refund", 5217077 * time.Microsecond, one(5)},
			{"refund", 5217906 * time.Microsecond, one(3)},
		}},
		{"a refund of one more than the report", []leakyStep{{"report", 0, one(7)}, {"refund", 0, one(8)}}},
		{"two refunds past the report", []leakyStep{{"report", 0, one(7)}, {"refund", 20 * ms, one(2)}, {"refund", 20 * ms, one(6)}}},
		{"two reports in one TakeAll", []leakyStep{{"reports", 0, []int64{4, 4}}, {"refund", 0, one(9)}}},
		{"a report on an idle key after a take", []leakyStep{{"take", 0, one(1)}, {"report", 300 * ms, one(7)}, {"refund", 300 * ms, one(8)}}},
		// Not idle: the report queues a spacing after the last leave, or
		// after now within a spacing of it, and charges its cost alone.
		{"a report behind a unit leaving", []leakyStep{{"take", 0, one(1)}, {"report", 10 * ms, one(7)}, {"refund", 10 * ms, one(8)}}},
		{"a report behind a busy queue", []leakyStep{{"take", 0, one(3)}, {"report", 0, one(4)}, {"refund", 0, one(7)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fleet.NewFallback(memstore.New(memstore.Options{}), fleet.FallbackOptions{StartLocal: true, ProbeInterval: time.Hour,
				Probe: func(context.Context) error { return errDown }})
			t.Cleanup(f.Close)
			ref := sluicetest.NewReference()
			req := func(at time.Duration, cost int64, force bool) sluice.Request {
				return sluice.Request{Key: "k", Algorithm: sluice.LeakyBucket, Limit: l, Cost: cost, Now: sluicetest.T0.Add(at), Force: force}
			}
			// Each step, then a take of cost 0 and one of Burst+1, which
			// an idle key admits at once and a busy one later or not.
			steps := tc.steps
			last := steps[len(steps)-1].at
			steps = append(steps[:len(steps):len(steps)], leakyStep{"take", last, one(0)}, leakyStep{"take", last, one(3)})
			for i, st := range steps {
				var got, want []sluice.Decision
				var err error
				switch st.op {
				case "take", "report":
					r := req(st.at, st.cost[0], st.op == "report")
					got, want = make([]sluice.Decision, 1), make([]sluice.Decision, 1)
					if want[0], err = ref.Take(ctx, r); err == nil {
						got[0], err = f.Take(ctx, r)
					}
				case "reports":
					rs := make([]sluice.Request, len(st.cost))
					for j, c := range st.cost {
						rs[j] = req(st.at, c, true)
					}
					got, want = make([]sluice.Decision, len(rs)), make([]sluice.Decision, len(rs))
					if err = ref.TakeAll(ctx, rs, want); err == nil {
						err = f.TakeAll(ctx, rs, got)
					}
				case "refund":
					r := req(st.at, st.cost[0], false)
					got, want = make([]sluice.Decision, 1), make([]sluice.Decision, 1)
					if want[0], err = ref.Refund(ctx, r); err == nil {
						got[0], err = f.Refund(ctx, r)
					}
				}
				if err != nil {
					t.Fatalf("step %d, %s %v at t0+%v: %v", i, st.op, st.cost, st.at, err)
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("step %d, %s %v at t0+%v = %+v, want %+v as memory decides", i, st.op, st.cost, st.at, got, want)
				}
			}
			// Every trace gives back no more than memory holds.
			if n := f.RefundsDropped(); n != 0 {
				t.Errorf("RefundsDropped = %d, want 0: memory counted every unit given back", n)
			}
		})
	}
}

// TestFallbackRefundLeakyReportAfterOutage: once Redis is back, the units a
// report counted in memory during the outage go back to memory, the
// spacing its queue was charged past its cost on an idle key included,
// and the rest to Redis. A report behind a unit still leaving charged its
// cost alone: a refund of one more than memory holds gives Redis that one.
// Before, the idle key's extra spacing went to Redis, which had not
// counted it.
func TestFallbackRefundLeakyReportAfterOutage(t *testing.T) {
	f, s, ch := newCutOff(t, 1)
	ctx := context.Background()
	l := sluice.Every(5, 250*time.Millisecond).WithBurst(2) // a spacing of 50 ms
	key := fmt.Sprintf("leakyreport/%d", time.Now().UnixNano())
	idle, leaving := key+"/idle", key+"/leaving"
	req := func(key string, at time.Duration, cost int64, force bool) sluice.Request {
		return sluice.Request{Key: key, Algorithm: sluice.LeakyBucket, Limit: l, Cost: cost, Now: outageNow.Add(at), Force: force}
	}
	do := func(d sluice.Decision, err error) sluice.Decision {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	// Redis counts 2 units of each key: Remaining 1 at t0, 2 once one is
	// given back, 3 (Burst+1) at rest.
	for _, k := range []string{idle, leaving} {
		if d := do(f.Take(ctx, req(k, 0, 2, false))); !d.Allowed || d.Remaining != 1 {
			t.Fatalf("Redis up: take 2 of %s = %+v, want admitted with 1 left", k, d)
		}
	}
	outage(t, f, s, ch)
	ms := time.Millisecond
	do(f.Take(ctx, req(idle, 0, 7, true)))
	do(f.Take(ctx, req(leaving, 0, 1, false)))
	do(f.Take(ctx, req(leaving, 10*ms, 7, true)))
	back(t, s, ch)
	for _, tc := range []struct {
		key    string
		at     time.Duration
		memory int64 // the units memory holds
		redis  int64 // Redis's Remaining after the refund of memory's and 1 more
	}{
		{idle, 0, 8, 2},
		{leaving, 10 * ms, 8, 2},
	} {
		do(f.Refund(ctx, req(tc.key, tc.at, tc.memory+1, false)))
		if d := do(f.Local().Take(ctx, req(tc.key, tc.at, 0, false))); d.Remaining != l.Burst+1 || d.ResetAfter != 0 {
			t.Errorf("%s: memory after a refund of %d: %+v, want at rest: its %d units given back", tc.key, tc.memory+1, d, tc.memory)
		}
		if d := do(s.Store.Take(ctx, req(tc.key, tc.at, 0, false))); d.Remaining != tc.redis {
			t.Errorf("%s: Redis after a refund of %d: %+v, want Remaining %d: one of its 2 units given back", tc.key, tc.memory+1, d, tc.redis)
		}
	}
	if n := f.RefundsDropped(); n != 0 {
		t.Errorf("RefundsDropped = %d, want 0", n)
	}
}
