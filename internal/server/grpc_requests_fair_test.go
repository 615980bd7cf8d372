package server_test

import (
	"context"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/memstore"
)

// TestGRPCRequestBytesStalledFirst: a client that spreads stalled
// unfinished requests over many connections, up to the bound (lowered
// here to 16 MiB), each holding less than Envoy's largest request, does
// not get Envoy's connection closed when that request takes the count
// past the bound: the connections whose unfinished requests began
// longest ago are closed first, in that order, however they trickle
// since; Envoy's request, sent whole, is answered, and so is the next on
// its connection. Before, the connection holding the most was closed:
// Envoy's, once its request held more than one of the client's.
func TestGRPCRequestBytesStalledFirst(t *testing.T) {
	const bound, each = 16 << 20, 256 << 10
	env := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, "domain: web\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n"),
		envOpts{grpc: server.GRPCOptions{KeepaliveTime: time.Hour, MaxRequestBytes: bound}})
	body := requestOf(t, each+1<<10) // never whole: its last KiB never comes
	attackers := make([]*reqClient, bound/each-1)
	ids := make([]uint32, len(attackers))
	var held int64
	for i := range attackers {
		attackers[i] = dialRequests(t, env)
		id, err := attackers[i].open()
		if err == nil {
			err = attackers[i].send(id, body[:each], false)
		}
		if err != nil {
			t.Fatalf("attacker %d: %v", i, err)
		}
		ids[i] = id
		held += each
		waitRequestBytes(t, env, held) // each begins after the one before
	}
	// They trickle, the last begun first: a byte more each.
	for i := len(attackers) - 1; i >= 0; i-- {
		if err := attackers[i].send(ids[i], body[each:each+1], false); err != nil {
			t.Fatalf("attacker %d trickling: %v", i, err)
		}
		held++
		waitRequestBytes(t, env, held)
	}
	// Envoy: a grpc-go connection of its own, its largest request whole.
	conn, err := grpc.NewClient(env.conn.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	envoy := rlsv3.NewRateLimitServiceClient(conn)
	req := envoySizedRequest()
	if size := proto.Size(req) + 5; int64(size) <= each || held+int64(size) <= bound {
		t.Fatalf("Envoy's request of %d bytes: want more than each client connection holds (%d) and enough to pass the bound", size, each)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard, not a measure
	defer cancel()
	for call := range 2 {
		if resp, err := envoy.ShouldRateLimit(ctx, req); err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("Envoy's call %d: %v, %v; want OK", call, resp.GetOverallCode(), err)
		}
	}
	closed := env.grpc.ClosedRequestBytes()
	if closed == 0 {
		t.Fatal("no connection closed, want the client's that began first")
	}
	// The connections closed are the client's that began first, and only
	// those: the rest hold their requests still.
	ended := func() (n uint64, which []int) {
		for i, a := range attackers {
			a.mu.Lock()
			if a.err != nil {
				n++
				which = append(which, i)
			}
			a.mu.Unlock()
		}
		return n, which
	}
	for guard := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		n, which := ended()
		if n == closed {
			for j, i := range which {
				if i != j {
					t.Fatalf("the client's connections closed: %v; want the %d begun first", which, closed)
				}
			}
			break
		}
		if time.Now().After(guard) { // a hang guard, not a measure
			t.Fatalf("the client's connections ended: %v; want the %d begun first", which, closed)
		}
	}
	waitRequestBytes(t, env, (int64(len(attackers))-int64(closed))*(each+1))
	t.Logf("%d of the client's %d connections closed, the first begun; Envoy's %d-byte requests answered", closed, len(attackers), proto.Size(req)+5)
}
