package sluicetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// testLogInvariant: no window (t − Period, t] ever holds more than Rate.
func testLogInvariant(t *testing.T, s sluice.Store) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed(t), 1))
	l := sluice.Every(5, time.Second)
	key := uniq(t, "log")
	type adm struct {
		at   time.Duration
		cost int64
	}
	var admitted []adm
	for i, st := range randomTrace(rng, 2000, 1, l) {
		d, err := s.Take(ctx, sluice.Request{Key: key, Algorithm: sluice.SlidingWindowLog, Limit: l, Cost: st.cost, Now: T0.Add(st.at)})
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed || st.cost == 0 {
			continue
		}
		admitted = append(admitted, adm{st.at, st.cost})
		sum := int64(0)
		for _, a := range admitted {
			if a.at > st.at-l.Period {
				sum += a.cost
			}
		}
		if sum > l.Rate {
			t.Fatalf("step %d at t0+%v: %d admitted within one period, limit %d", i, st.at, sum, l.Rate)
		}
	}
	if len(admitted) < 100 {
		t.Fatalf("only %d admissions: the trace did not exercise the log", len(admitted))
	}
}

// testFixedInvariant: no aligned window ever admits more than Rate.
func testFixedInvariant(t *testing.T, s sluice.Store) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed(t), 2))
	l := sluice.Every(5, time.Second)
	key := uniq(t, "fixed")
	perWindow := map[int64]int64{}
	for i, st := range randomTrace(rng, 2000, 1, l) {
		now := T0.Add(st.at)
		d, err := s.Take(ctx, sluice.Request{Key: key, Algorithm: sluice.FixedWindow, Limit: l, Cost: st.cost, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			w := now.UnixMicro() / l.Period.Microseconds()
			perWindow[w] += st.cost
			if perWindow[w] > l.Rate {
				t.Fatalf("step %d: window %d admitted %d, limit %d", i, w, perWindow[w], l.Rate)
			}
		}
	}
}

// testRemaining: after a decision reporting Remaining r, exactly r more
// requests of cost 1 are admitted at the same instant.
func testRemaining(t *testing.T, s sluice.Store) {
	ctx := context.Background()
	sd := seed(t)
	for _, alg := range sluice.Algorithms() {
		for li, l := range DifferentialLimits()[:5] {
			if skipLimit(alg, l) {
				continue
			}
			rng := rand.New(rand.NewPCG(sd, uint64(li)*16+uint64(alg)))
			for probe := range 4 {
				key := uniq(t, fmt.Sprintf("%s/%d/%d", alg, li, probe))
				trace := randomTrace(rng, 1+rng.IntN(40), 1, l)
				var last time.Duration
				for _, st := range trace {
					if _, err := s.Take(ctx, sluice.Request{Key: key, Algorithm: alg, Limit: l, Cost: st.cost, Now: T0.Add(st.at)}); err != nil {
						t.Fatal(err)
					}
					last = st.at
				}
				req := sluice.Request{Key: key, Algorithm: alg, Limit: l, Cost: 0, Now: T0.Add(last)}
				q, err := s.Take(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				req.Cost = 1
				for i := range q.Remaining {
					if d, _ := s.Take(ctx, req); !d.Allowed {
						t.Fatalf("%s %v: Remaining was %d but request %d at the same instant was denied", alg, l, q.Remaining, i+1)
					}
				}
				if d, _ := s.Take(ctx, req); d.Allowed {
					t.Fatalf("%s %v: Remaining was %d but request %d at the same instant was admitted too", alg, l, q.Remaining, q.Remaining+1)
				}
			}
		}
	}
}

// testTakeAll: a request denied by one limit consumes nothing from the
// others; an allowed one consumes from all.
func testTakeAll(t *testing.T, s sluice.Store) {
	ctx := context.Background()
	for _, alg := range sluice.Algorithms() {
		a, b := uniq(t, alg.String()+"/a"), uniq(t, alg.String()+"/b")
		wide, narrow := sluice.PerMinute(10), sluice.PerMinute(1)
		reqs := []sluice.Request{
			{Key: a, Algorithm: alg, Limit: wide, Cost: 1, Now: T0},
			{Key: b, Algorithm: alg, Limit: narrow, Cost: 1, Now: T0},
		}
		ds := make([]sluice.Decision, 2)
		var last sluice.Decision // the wide limit's last committed decision
		for i := 0; ; i++ {
			if err := s.TakeAll(ctx, reqs, ds); err != nil {
				t.Fatal(err)
			}
			if !ds[0].Allowed {
				t.Fatalf("%s: TakeAll #%d = %+v: the wide limit denied first", alg, i, ds)
			}
			if !ds[1].Allowed {
				break
			}
			if i > 3 {
				t.Fatalf("%s: the narrow limit (1/m) admitted %d at one instant", alg, i+1)
			}
			last = ds[0]
		}
		for range 3 {
			if err := s.TakeAll(ctx, reqs, ds); err != nil {
				t.Fatal(err)
			}
			if !ds[0].Allowed || ds[1].Allowed {
				t.Fatalf("%s: TakeAll = %+v, want the wide limit to allow and the narrow one to deny", alg, ds)
			}
		}
		q := reqs[0]
		q.Cost = 0
		d, err := s.Take(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if d.Remaining != last.Remaining {
			t.Fatalf("%s: after denied TakeAlls the wide limit has Remaining %d, want %d as after its last admitted request (denied requests must consume nothing)", alg, d.Remaining, last.Remaining)
		}
	}
}
