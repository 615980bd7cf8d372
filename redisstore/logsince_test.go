package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// LoggedSince counts the units a sliding log holds that were logged after
// an instant and are still in its window, as the pure log would have them:
// runs of several units, expiry at the period, a forced charge's trim to
// Rate+1, a key never used; and refuses an algorithm without a log.
func TestLoggedSince(t *testing.T) {
	srv := redistest.StartServer(t)
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}})
	ctx := context.Background()
	l := sluice.Limit{Rate: 10, Period: 10 * time.Second}
	t0 := sluicetest.T0
	req := func(at time.Duration, cost int64, force bool) sluice.Request {
		return sluice.Request{Key: "log", Algorithm: sluice.SlidingWindowLog, Limit: l, Cost: cost, Force: force, Now: t0.Add(at)}
	}
	for _, h := range []struct {
		at   time.Duration
		cost int64
	}{{0, 3}, {time.Second, 2}, {2 * time.Second, 4}} {
		if d, err := s.Take(ctx, req(h.at, h.cost, false)); err != nil || !d.Allowed {
			t.Fatalf("take %d at %v: %+v, %v", h.cost, h.at, d, err)
		}
	}
	us := func(at time.Duration) int64 { return t0.Add(at).UnixMicro() }
	for _, c := range []struct {
		name      string
		now       time.Duration
		after     int64
		want      int64
		wantClock int64
	}{
		{"every unit", 2 * time.Second, -1, 9, us(2 * time.Second)},
		{"after the first run", 2 * time.Second, us(500 * time.Millisecond), 6, us(2 * time.Second)},
		{"after the second run's instant: not in its tick", 2 * time.Second, us(time.Second), 4, us(2 * time.Second)},
		{"after the last", 3 * time.Second, us(2 * time.Second), 0, us(3 * time.Second)},
		{"the first run out of the window", 10*time.Second + time.Millisecond, -1, 6, us(10*time.Second + time.Millisecond)},
		{"out of the window and after", 11*time.Second + time.Millisecond, us(0), 4, us(11*time.Second + time.Millisecond)},
	} {
		r := req(c.now, 0, false)
		n, clock, err := s.LoggedSince(ctx, r, c.after)
		if err != nil || n != c.want || clock != c.wantClock {
			t.Errorf("%s: LoggedSince = %d, %d, %v; want %d, %d", c.name, n, clock, err, c.want, c.wantClock)
		}
	}
	// Nothing read wrote anything: the log decides as before.
	if d, err := s.Take(ctx, req(2*time.Second, 0, false)); err != nil || d.Remaining != 1 {
		t.Fatalf("after the reads, Remaining = %+v, %v; want 1", d, err)
	}
	// A forced charge of 30 at 3 s keeps the newest Rate+1 = 11 units.
	if _, err := s.Take(ctx, req(3*time.Second, 30, true)); err != nil {
		t.Fatal(err)
	}
	if n, _, err := s.LoggedSince(ctx, req(3*time.Second, 0, false), us(2*time.Second)); err != nil || n != 11 {
		t.Errorf("after a charge of 30 trimmed to 11: LoggedSince = %d, %v; want 11", n, err)
	}
	if n, clock, err := s.LoggedSince(ctx, sluice.Request{Key: "never", Algorithm: sluice.SlidingWindowLog, Limit: l, Now: t0}, -1); err != nil || n != 0 || clock != us(0) {
		t.Errorf("a key never used: LoggedSince = %d, %d, %v; want 0", n, clock, err)
	}
	_, _, err := s.LoggedSince(ctx, sluice.Request{Key: "log", Algorithm: sluice.SlidingWindowCounter, Limit: l, Now: t0}, -1)
	if !errors.Is(err, sluice.ErrUnknownAlgorithm) {
		t.Errorf("a sliding_window_counter: err = %v, want ErrUnknownAlgorithm", err)
	}
}
