package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// hangAfter is how long a failing call may take before the test calls it
// a hang: twenty times the store's timeout. It detects a call that never
// returns; it does not measure the timeout, which a 2-core machine shared
// with other builds, under -race, can overrun by seconds (a bound it can
// miss would make the suite fail by chance). That the timeout ended a
// call is what its error shows (context.DeadlineExceeded, mustTimeOut),
// and that the call waited it out, a lower bound no load can break; the
// bound itself is TestDeadlinesBound's, on a fake clock.
func hangAfter(timeout time.Duration) time.Duration { return 20 * timeout }

// upTimeout is the store timeout of the failure tests. Calls made while
// Redis is up must succeed, connecting included, on a loaded machine too:
// 50ms (the default) can be missed there. A call to a stopped server
// fails at once; one to a hung server takes the timeout.
const upTimeout = time.Second

func req(key string, at time.Duration) sluice.Request {
	return sluice.Request{Key: key, Algorithm: sluice.TokenBucket, Limit: sluice.PerMinute(10), Cost: 1, Now: sluicetest.T0.Add(at)}
}

// mustFailFast calls f and checks that it fails with ErrStoreUnavailable,
// and returns (within hangAfter(timeout)): the error and how long f took.
func mustFailFast(t *testing.T, what string, timeout time.Duration, f func() error) (error, time.Duration) {
	t.Helper()
	start := time.Now()
	err := f()
	took := time.Since(start)
	if !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Fatalf("%s: err = %v, want one wrapping sluice.ErrStoreUnavailable", what, err)
	}
	if took > hangAfter(timeout) {
		t.Fatalf("%s took %v: hung, past 20 times the timeout %v", what, took, timeout)
	}
	t.Logf("%s failed in %v: %v", what, took, err)
	return err, took
}

// mustTimeOut is mustFailFast for a call to a server that does not
// answer: it must end by the store's timeout (the caller's context has no
// deadline), DeadlineExceeded, having waited it out: no sooner than the
// timeout less the width of the shared deadlines (timeout/16, see
// deadlines), on the clock the store's timer runs on.
func mustTimeOut(t *testing.T, what string, timeout time.Duration, f func() error) {
	t.Helper()
	err, took := mustFailFast(t, what, timeout, f)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s: err = %v, want the timeout's, context.DeadlineExceeded", what, err)
	}
	if took < timeout-timeout/16 {
		t.Fatalf("%s failed after %v, before the timeout %v", what, took, timeout)
	}
}

// untilOK retries f until it succeeds, for at most 10 s of attempts (each
// bounded by the store's timeout): the client reconnects on its own.
func untilOK(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after 10s: %v", what, err)
		}
	}
}

func TestRedisDownThenBack(t *testing.T) {
	srv := redistest.StartServer(t)
	const timeout = upTimeout
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}, Timeout: timeout})
	ctx := context.Background()
	if d, err := s.Take(ctx, req("down", 0)); err != nil || !d.Allowed {
		t.Fatalf("Take before Stop = %+v, %v; want allowed", d, err)
	}
	srv.Stop()
	for range 3 {
		mustFailFast(t, "Take while down", timeout, func() error { _, err := s.Take(ctx, req("down", time.Second)); return err })
		mustFailFast(t, "TakeAll while down", timeout, func() error {
			return s.TakeAll(ctx, []sluice.Request{req("down", 0), req("down2", 0)}, make([]sluice.Decision, 2))
		})
		mustFailFast(t, "Ping while down", timeout, func() error { return s.Ping(ctx) })
	}
	srv.Restart()
	untilOK(t, "Take after Restart", func() error { _, err := s.Take(ctx, req("down", 2*time.Second)); return err })
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping after Restart: %v", err)
	}
	// The restarted server has no data: the key starts full again.
	if d, err := s.Take(ctx, req("fresh", 0)); err != nil || !d.Allowed || d.Remaining != 9 {
		t.Fatalf("Take(fresh) after Restart = %+v, %v; want allowed, remaining 9", d, err)
	}
}

func TestRedisHung(t *testing.T) {
	srv := redistest.StartServer(t)
	const timeout = upTimeout
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}, Timeout: timeout})
	ctx := context.Background()
	if _, err := s.Take(ctx, req("hung", 0)); err != nil {
		t.Fatalf("Take before SIGSTOP: %v", err)
	}
	pid := srv.PID()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %d: %v", pid, err)
	}
	stopped := true
	defer func() {
		if stopped {
			syscall.Kill(pid, syscall.SIGCONT)
		}
	}()
	for range 3 {
		mustTimeOut(t, "Take while hung", timeout, func() error { _, err := s.Take(ctx, req("hung", time.Second)); return err })
	}
	syscall.Kill(pid, syscall.SIGCONT)
	stopped = false
	untilOK(t, "Take after SIGCONT", func() error { _, err := s.Take(ctx, req("hung", 2*time.Second)); return err })
}

func TestCallerContextCancelled(t *testing.T) {
	srv := redistest.StartServer(t)
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Take(ctx, req("cancelled", 0))
	if !errors.Is(err, sluice.ErrStoreUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Take with a cancelled context: err = %v, want ErrStoreUnavailable and context.Canceled", err)
	}
}

func TestNewUnreachable(t *testing.T) {
	srv := redistest.StartServer(t)
	addr := srv.Addr
	srv.Stop()
	start := time.Now()
	_, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{addr}, Timeout: 50 * time.Millisecond})
	if !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Fatalf("New(%s) with nothing listening: err = %v, want ErrStoreUnavailable", addr, err)
	}
	// New's bound is the timeout, at least a second.
	if took := time.Since(start); took > hangAfter(time.Second) {
		t.Fatalf("New(%s) took %v: hung, past 20 times its bound of a second", addr, took)
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    redisstore.Options
		ok   bool
	}{
		{"single", redisstore.Options{Addrs: []string{"127.0.0.1:6379"}}, true},
		{"no addrs", redisstore.Options{}, false},
		{"bad addr", redisstore.Options{Addrs: []string{"localhost"}}, false},
		{"braces in prefix", redisstore.Options{Addrs: []string{"127.0.0.1:6379"}, Prefix: "a{b}:"}, false},
		{"negative timeout", redisstore.Options{Addrs: []string{"127.0.0.1:6379"}, Timeout: -1}, false},
		{"cluster and sentinel", redisstore.Options{Addrs: []string{"127.0.0.1:6379"}, Cluster: true, Sentinel: "m"}, false},
	} {
		if err := tc.o.Validate(); (err == nil) != tc.ok {
			t.Errorf("Options{%s}.Validate() = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func TestPassword(t *testing.T) {
	srv := redistest.StartServer(t)
	if _, err := redistest.Do(srv.Addr, "CONFIG", "SET", "requirepass", "s3cret"); err != nil {
		t.Fatal(err)
	}
	for _, o := range []redisstore.Options{
		{Addrs: []string{srv.Addr}, Password: "wrong"},
		{Addrs: []string{srv.Addr}},
		{Addrs: []string{srv.Addr}, Username: "nobody", Password: "s3cret"},
	} {
		_, err := connect(o)
		if !errors.Is(err, redisstore.ErrAuth) || !errors.Is(err, sluice.ErrStoreUnavailable) || !strings.Contains(err.Error(), "refused the credentials") {
			t.Errorf("New with username %q, password %q: %v; want ErrAuth (and ErrStoreUnavailable) saying the credentials were refused", o.Username, o.Password, err)
		}
	}
	// Redis that does not answer is not a refusal.
	srv2 := redistest.StartServer(t)
	srv2.Stop()
	if _, err := connect(redisstore.Options{Addrs: []string{srv2.Addr}, Password: "x"}); err == nil || errors.Is(err, redisstore.ErrAuth) {
		t.Errorf("New on a stopped Redis: %v; want an error that is not ErrAuth", err)
	}
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}, Password: "s3cret"})
	if d, err := s.Take(context.Background(), req("pw", 0)); err != nil || !d.Allowed {
		t.Fatalf("Take with the password = %+v, %v; want allowed", d, err)
	}
}

func TestSentinel(t *testing.T) {
	master := redistest.StartServer(t)
	sentinel := redistest.StartSentinel(t, master)
	s := open(t, redisstore.Options{Addrs: []string{sentinel}, Sentinel: "mymaster"})
	if d, err := s.Take(context.Background(), req("via-sentinel", 0)); err != nil || !d.Allowed {
		t.Fatalf("Take through the sentinel = %+v, %v; want allowed", d, err)
	}
	if n, err := redistest.Do(master.Addr, "EXISTS", s.Key("via-sentinel")); err != nil || n != "1" {
		t.Fatalf("EXISTS %s on the master = %q, %v; want 1", s.Key("via-sentinel"), n, err)
	}
	if err := s.Ping(context.Background()); err != nil {
		t.Fatalf("Ping through the sentinel: %v", err)
	}
}
