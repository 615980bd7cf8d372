package server_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/memstore"
)

// TestGRPCUnreadTotal: the answers waiting for window over all the
// listener's connections are bounded (MaxUnreadTotal, lowered here to
// 500): connections that leave more than MaxUnreadAnswers waiting, and so
// would be closed after the unread timeout (an hour here), are closed at
// once, those waiting longest first, as soon as all of them together
// leave more than the bound waiting. Without it, each such connection
// held its answers (up to its 1,000 calls', ~2.5 MB) for the timeout, 10
// s, over up to grpc.max_connections (10,000) connections: some 25 GB.
func TestGRPCUnreadTotal(t *testing.T) {
	env := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{grpc: server.GRPCOptions{
		MaxCalls: 10_000, UnreadTimeout: time.Hour, MaxUnreadTotal: 500, KeepaliveTime: time.Hour,
	}})
	clients := make([]*unreadClient, 3)
	for i, n := range []int{300, 150, 200} {
		clients[i] = dialUnread(t, env, 8)
		if err := clients[i].begin(n); err != nil {
			t.Fatalf("client %d: %d calls: %v before their answers began", i, n, err)
		}
	}
	// The third's answers took the count past 500 (300+150+101): the first,
	// waiting longest, was closed, before the third read its answers.
	for i, want := range []bool{false, true, true} {
		if err := clients[i].alive(); (err == nil) != want {
			t.Errorf("client %d: read error %v, want the connection open %v", i, err, want)
		}
	}
	if got := env.grpc.ClosedUnread(); got != 1 {
		t.Errorf("ClosedUnread() = %d, want 1", got)
	}
}

// TestGRPCUnreadTotalReaders: a grpc-go client that reads every answer,
// with grpc-go's windows (64 KiB until its estimate grows them) and 1,000
// calls of large answers in flight, leaves up to its 1,000 calls' answers
// waiting for its connection's window for a moment, over and over: on a
// listener where connections that do not read theirs already leave close
// to the bound (MaxUnreadTotal, lowered here to 1,200) waiting, it is
// never the one closed, since each window it grants lets its answers
// through (it leaves none waiting for a moment, and starts anew to wait),
// while theirs wait on; only theirs are.
// Keepalive is off (an hour): its unanswered ping would close the
// non-readers some 40 s on, which a loaded machine reached here.
func TestGRPCUnreadTotalReaders(t *testing.T) {
	env := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{headers: true, grpc: server.GRPCOptions{
		MaxCalls: 10_000, UnreadTimeout: time.Hour, MaxUnreadTotal: 1200, KeepaliveTime: time.Hour,
	}})
	// Six non-readers leave 900 answers waiting: the reader needs to leave
	// 301 waiting for the bound to be passed.
	idle := make([]*unreadClient, 6)
	for i := range idle {
		idle[i] = dialUnread(t, env, 8)
		if err := idle[i].begin(150); err != nil {
			t.Fatalf("non-reader %d: %v before its answers began", i, err)
		}
	}
	const callers, rounds = server.DefaultMaxConcurrentStreams, 3
	failed, err := readAnswers(t, env, nil, largeRequest(), callers, rounds)
	if failed != 0 {
		t.Errorf("a client reading every answer: %d of %d calls failed (%v), want none", failed, callers*rounds, err)
	}
	closed := 0
	for i, u := range idle {
		if err := u.alive(); err != nil {
			closed++
			t.Logf("non-reader %d closed (%v)", i, err)
		}
	}
	t.Logf("%d of %d non-readers closed for the bound while the reader's answers waited for window", closed, len(idle))
	if got := env.grpc.ClosedUnread(); got != uint64(closed) {
		t.Errorf("ClosedUnread() = %d, want the %d non-readers closed", got, closed)
	}
}

// TestGRPCUnreadTotalSmall: connections that leave MaxUnreadAnswers or
// fewer answers waiting each, and so are never closed for the unread
// timeout, count toward the listener's bound (MaxUnreadTotal, lowered
// here to 500) too: the sixth of six leaving 100 each takes the count
// past it, and the first, waiting longest, is closed. They did not
// count: 100 answers (~300 KB) on each of up to grpc.max_connections
// (10,000) connections held some 3 GB until the connections' age.
func TestGRPCUnreadTotalSmall(t *testing.T) {
	env := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{grpc: server.GRPCOptions{
		MaxCalls: 10_000, MaxUnreadTotal: 500, KeepaliveTime: time.Hour,
	}})
	clients := make([]*unreadClient, 6)
	for i := range clients {
		clients[i] = dialUnread(t, env, 8)
		if err := clients[i].begin(server.MaxUnreadAnswers); err != nil {
			t.Fatalf("client %d: %d calls: %v before their answers began", i, server.MaxUnreadAnswers, err)
		}
	}
	for i, u := range clients {
		if err := u.alive(); (err == nil) != (i > 0) {
			t.Errorf("client %d: read error %v, want the connection open %v", i, err, i > 0)
		}
	}
	if got := env.grpc.ClosedUnread(); got != 1 {
		t.Errorf("ClosedUnread() = %d, want 1", got)
	}
}
