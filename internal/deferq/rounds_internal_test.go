package deferq

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/rueidis"
)

// The claim rounds keep their time whatever the reader is doing: waiting
// after empty reads (backing off to a second), waiting for room, waiting
// after failed reads, or reading without pause. A round starts every
// claimEvery (a quarter of ClaimIdle, at most 5 s), or, while reads
// keep coming, at most one read later. Rounds came every ClaimIdle/4
// (7.5 s by default, 15 min at an hour), checked only between the
// reader's waits, each up to a second past it.
func TestClaimRoundsKeepTime(t *testing.T) {
	const read = 300 * time.Millisecond // how long a read takes in "reading"
	for _, tc := range []struct {
		name      string
		claimIdle time.Duration
		fresh     func() (int, bool, error)
		slack     time.Duration // how late past claimEvery a round may start
	}{
		{"idle", 30 * time.Second, func() (int, bool, error) { return 0, true, nil }, 0},
		{"idle, claim_idle 1h", time.Hour, func() (int, bool, error) { return 0, true, nil }, 0},
		{"idle, claim_idle 2s", 2 * time.Second, func() (int, bool, error) { return 0, true, nil }, 0},
		{"no room", 30 * time.Second, func() (int, bool, error) { return 0, false, nil }, 0},
		{"reads fail", 30 * time.Second, func() (int, bool, error) { return 0, true, errors.New("down") }, 0},
		{"reading", 30 * time.Second, func() (int, bool, error) { time.Sleep(read); return 1, true, nil }, read},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q, err := New(Options{Connect: func() rueidis.Client { return nil }, ClaimIdle: tc.claimIdle, DeliveryTimeout: tc.claimIdle / 3})
				if err != nil {
					t.Fatal(err)
				}
				w := newWorker(q, &Rule{Name: "jobs"}, "s")
				every := q.o.claimEvery()
				if want := min(tc.claimIdle/4, 5*time.Second); every != want {
					t.Fatalf("claimEvery with ClaimIdle %v = %v, want %v", tc.claimIdle, every, want)
				}
				t0 := time.Now()
				var rounds []time.Duration
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() {
					defer close(done)
					w.readLoop(ctx, readSteps{
						prune: func() {},
						claim: func() bool { rounds = append(rounds, time.Since(t0)); return true },
						fresh: tc.fresh,
					})
				}()
				time.Sleep(10*every + every/2)
				cancel()
				<-done
				if len(rounds) < 10 || rounds[0] != 0 {
					t.Fatalf("claim rounds at %v over %v, want the first at once and one every %v", rounds, 10*every+every/2, every)
				}
				for i := 1; i < len(rounds); i++ {
					if gap := rounds[i] - rounds[i-1]; gap < every || gap > every+tc.slack {
						t.Errorf("claim round %d at %v, %v after the one before; want %v to %v after (rounds at %v)", i, rounds[i], gap, every, every+tc.slack, rounds)
						break
					}
				}
			})
		})
	}
}

// A claim round claims an entry left by a silent consumer once it has been
// idle for ClaimIdle, not before: with TestClaimRoundsKeepTime, one idle
// for ClaimIdle is claimed within ClaimIdle plus one claimEvery (plus one
// read). Driven round by round against a real Redis, the entry's idle
// time set by hand on either side of ClaimIdle.
func TestClaimRoundTakesWhatIsIdle(t *testing.T) {
	q, c := jobsQueue(t)
	rule := Rule{Name: "jobs"}
	w := newWorker(q, &rule, "s")
	ctx := context.Background()
	stream := w.base + "q"
	if err := c.Do(ctx, c.B().XgroupCreate().Key(stream).Group(group).Id("0").Mkstream().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("POST", "/job", strings.NewReader("job"))
	if _, err := q.Enqueue(ctx, "jobs", []string{"k"}, r, r.Header, []byte("job")); err != nil {
		t.Fatal(err)
	}
	xs, err := c.Do(ctx, c.B().Xreadgroup().Group(group, "gone").Count(1).Streams().Key(stream).Id(">").Build()).AsXRead()
	if err != nil || len(xs[stream]) != 1 {
		t.Fatalf("XREADGROUP gone: %v, %v; want the one entry", xs, err)
	}
	sid := xs[stream][0].ID
	setIdle := func(d time.Duration) {
		t.Helper()
		if err := c.Do(ctx, c.B().Xclaim().Key(stream).Group(group).Consumer("gone").MinIdleTime("0").Id(sid).Idle(d.Milliseconds()).Justid().Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	s := w.steps(ctx, c)
	// round runs one claim round and returns what it handed over (it
	// hands over only what it claimed, and waits for it to be taken).
	round := func() []*entry {
		t.Helper()
		done := make(chan bool, 1)
		go func() { done <- s.claim() }()
		select {
		case b := <-w.in:
			<-done
			return b
		case ok := <-done:
			if !ok {
				t.Fatal("claim round: ctx ended")
			}
			return nil
		}
	}
	setIdle(w.q.o.ClaimIdle - time.Second)
	if b := round(); len(b) != 0 {
		t.Fatalf("a round claimed %d entries idle for %v, under ClaimIdle (%v)", len(b), w.q.o.ClaimIdle-time.Second, w.q.o.ClaimIdle)
	}
	if o := owner(t, c, w, sid); o != "gone" {
		t.Fatalf("%s pending with %q after a round before ClaimIdle, want still with gone", sid, o)
	}
	setIdle(w.q.o.ClaimIdle)
	if b := round(); len(b) != 1 || b[0].sid != sid {
		t.Fatalf("a round handed over %d entries once %s was idle for ClaimIdle (%v), want it", len(b), sid, w.q.o.ClaimIdle)
	}
	if o := owner(t, c, w, sid); o != w.consumer {
		t.Errorf("%s pending with %q after the round, want %q", sid, o, w.consumer)
	}
}
