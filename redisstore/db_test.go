package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestDBKeepsCountsApart: two stores on databases 1 and 2 of one Redis,
// with the same prefix, count the same key apart: each in its own
// database (SELECT n, EXISTS), none in database 0.
func TestDBKeepsCountsApart(t *testing.T) {
	srv := redistest.StartServer(t)
	one := open(t, redisstore.Options{Addrs: []string{srv.Addr}, DB: 1})
	two := open(t, redisstore.Options{Addrs: []string{srv.Addr}, DB: 2})
	ctx := context.Background()
	r := sluice.Request{Namespace: "api", Key: "k", Algorithm: sluice.FixedWindow, Limit: sluice.PerMinute(3), Cost: 1, Now: sluicetest.T0}
	for i := range 3 {
		if d, err := one.Take(ctx, r); err != nil || !d.Allowed {
			t.Fatalf("db 1: take %d = %+v, %v; want allowed", i+1, d, err)
		}
	}
	if d, err := one.Take(ctx, r); err != nil || d.Allowed {
		t.Fatalf("db 1: take 4 of a limit of 3 = %+v, %v; want denied", d, err)
	}
	d, err := two.Take(ctx, r)
	if err != nil || !d.Allowed || d.Remaining != 2 {
		t.Fatalf("db 2: first take = %+v, %v; want allowed with 2 left (db 1's count is apart)", d, err)
	}
	key := one.KeyOf(&r)
	if key != two.KeyOf(&r) {
		t.Fatalf("the two stores name the key %q and %q; the test wants one name", key, two.KeyOf(&r))
	}
	for _, db := range []int{1, 2} {
		if n, err := redistest.DoIn(srv.Addr, db, "EXISTS", key); err != nil || n != "1" {
			t.Errorf("EXISTS %s in db %d = %q, %v; want 1", key, db, n, err)
		}
	}
	if n, err := redistest.Do(srv.Addr, "DBSIZE"); err != nil || n != "0" {
		keys, _ := redistest.Do(srv.Addr, "KEYS", "*")
		t.Errorf("DBSIZE of db 0 = %q, %v; want 0 (keys %q)", n, err, keys)
	}
}

// TestDBRefundsApart: Pub/Sub is not per database, so a store on a
// database other than 0 publishes its refunds on a channel that names
// it: the over-limit cache of a deployment on db 2 does not hear the
// refunds of one on db 1 with the same prefix, and database 0 keeps
// the channel it always had.
func TestDBRefundsApart(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	zero := open(t, redisstore.Options{Addrs: []string{srv.Addr}, PublishRefunds: true})
	one := open(t, redisstore.Options{Addrs: []string{srv.Addr}, DB: 1, PublishRefunds: true})
	two := open(t, redisstore.Options{Addrs: []string{srv.Addr}, DB: 2, PublishRefunds: true})
	if got := zero.RefundChannel(); got != "sluice:refunds" {
		t.Errorf("db 0: RefundChannel = %q, want sluice:refunds (as before databases)", got)
	}
	if got := one.RefundChannel(); got != "sluice:refunds:db1" || got != redisstore.RefundChannelOf("sluice:", 1) {
		t.Errorf("db 1: RefundChannel = %q, want sluice:refunds:db1 = RefundChannelOf", got)
	}
	watch := func(s *redisstore.Store) *heard {
		h := &heard{keys: make(chan string, 100), resumed: make(chan struct{}, 100)}
		done := make(chan error, 1)
		go func() { done <- s.WatchRefunds(ctx, h) }()
		t.Cleanup(func() {
			cancel()
			<-done
		})
		awaitOne(t, h.resumed, "subscription")
		return h
	}
	h0, h1, h2 := watch(zero), watch(one), watch(two)
	refund := func(s *redisstore.Store, key string) {
		t.Helper()
		r := sluice.Request{Namespace: "api", Key: key, Algorithm: sluice.FixedWindow, Limit: sluice.PerMinute(3), Cost: 1, Now: sluicetest.T0}
		if _, err := s.Take(ctx, r); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Refund(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	// On one server the messages come in the order of the scripts: a
	// key first heard after another's refund shows that one unheard.
	refund(one, "a")
	refund(two, "b")
	refund(zero, "c")
	refund(one, "d")
	for _, w := range []struct {
		name string
		h    *heard
		want []string
	}{{"db 0", h0, []string{"c"}}, {"db 1", h1, []string{"a", "d"}}, {"db 2", h2, []string{"b"}}} {
		for _, k := range w.want {
			if got := awaitOne(t, w.h.keys, w.name+"'s refund of "+k); got != "api"+k {
				t.Errorf("%s's watch heard %q, want api%s (refunds of its own database only)", w.name, got, k)
			}
		}
	}
	refund(two, "e")
	if got := awaitOne(t, h2.keys, "db 2's refund of e"); got != "apie" {
		t.Errorf("db 2's watch heard %q, want apie: db 1's refund of d reached it", got)
	}
}

// TestDBRefused: a database number New cannot use is an error naming it:
// negative, other than 0 on a Cluster (which has database 0 only, caught
// before any connection), or past those Redis has (its databases
// setting, 16 by default): ErrDB, which waiting does not mend.
func TestDBRefused(t *testing.T) {
	for _, c := range []struct {
		o    redisstore.Options
		want string
	}{
		{redisstore.Options{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}, Cluster: true, DB: 1}, "db 1: Redis Cluster has database 0 only"},
		{redisstore.Options{Addrs: []string{"127.0.0.1:1"}, DB: -1}, "db -1 must not be negative"},
	} {
		_, err := connect(c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v, want an error saying %q", c.o, err, c.want)
		}
		if err := c.o.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v, want an error saying %q", c.o, err, c.want)
		}
	}
	srv := redistest.StartServer(t)
	s, err := connect(redisstore.Options{Addrs: []string{srv.Addr}, DB: 16})
	if err == nil {
		s.Close()
		t.Fatal("New with db 16 on a Redis of 16 databases: connected, want refused")
	}
	if !errors.Is(err, redisstore.ErrDB) || !errors.Is(err, sluice.ErrStoreUnavailable) || !strings.Contains(err.Error(), "database 16") {
		t.Errorf("New with db 16 = %v, want ErrDB (and ErrStoreUnavailable) naming database 16", err)
	}
	if errors.Is(err, redisstore.ErrAuth) {
		t.Errorf("New with db 16 = %v: ErrAuth, want ErrDB alone", err)
	}
}
