package daemon

import (
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// The store over store.redis.tls to a Redis Cluster that speaks only TLS
// to its clients (and on its bus): the daemon finds the slots, decides,
// and follows a slot moved to another master after it connected (the
// MOVED names the new master's TLS port). Not tested before: Cluster over
// TLS was documented as untested.
func TestRedisTLSCluster(t *testing.T) {
	t.Parallel() // a Cluster (or Redis) and daemons of its own
	// Its fixed windows count in hours since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	ca := tlstest.NewCA(t, "redis-ca")
	peer := ca.Peer(t)
	c := redistest.StartTLSCluster(t, peer.CertFile, peer.KeyFile, ca.File)
	td := startDaemon(t, redisTLSYAML(c.TLSAddrs, "cluster: true", "{ca: "+ca.File+"}", "5/h"))
	if r := get(t, td.api+"/readyz"); r.status != http.StatusOK {
		t.Fatalf("/readyz: %d %s, want 200", r.status, r.body)
	}
	if n := allowedOf(t, td.api, "r", "before", 7); n != 5 {
		t.Errorf("before the move: %d of 7 admitted under 5/h, want 5", n)
	}
	// The slot of key "moved": found by a first decision, which writes
	// its Redis key on its master (the one node that holds it); the key is
	// then deleted, and the slot, empty, moved to the next master.
	do := func(addr string, args ...string) string {
		t.Helper()
		v, err := redistest.Do(addr, args...)
		if err != nil {
			t.Fatalf("%s %v: %v", addr, args, err)
		}
		return v
	}
	if n := allowedOf(t, td.api, "r", "moved", 1); n != 1 {
		t.Fatalf("first decision on key moved: %d of 1 admitted", n)
	}
	src, key := -1, ""
	for i, a := range c.Addrs {
		if k := do(a, "KEYS", "*moved*"); k != "" {
			src, key = i, k
		}
	}
	if src < 0 {
		t.Fatal("no node holds the Redis key of key moved")
	}
	slot := do(c.Addrs[src], "CLUSTER", "KEYSLOT", key)
	do(c.Addrs[src], "DEL", key)
	dst := (src + 1) % 3
	id := do(c.Addrs[dst], "CLUSTER", "MYID")
	for _, i := range []int{dst, src, 3 - src - dst} {
		do(c.Addrs[i], "CLUSTER", "SETSLOT", slot, "NODE", id)
	}
	// on_error: deny: a MOVED not followed would deny all 7.
	if n := allowedOf(t, td.api, "r", "moved", 7); n != 5 {
		t.Errorf("after the move: %d of 7 admitted under 5/h, want 5 (counted on the new master)", n)
	}
	if got := do(c.Addrs[dst], "CLUSTER", "COUNTKEYSINSLOT", slot); got != "1" {
		t.Errorf("keys in slot %s on the new master %s: %s, want 1 (the key counted there)", slot, c.Addrs[dst], got)
	}
	if got := do(c.Addrs[src], "CLUSTER", "COUNTKEYSINSLOT", slot); got != "0" {
		t.Errorf("keys in slot %s on the old master %s: %s, want 0", slot, c.Addrs[src], got)
	}
}
