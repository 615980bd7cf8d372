package fleet

import (
	"context"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// gatedLease holds the first reservation after arm until the gate opens.
type gatedLease struct {
	*redisstore.Store
	armed   atomic.Bool
	entered chan struct{}
	gate    chan struct{}
}

func (g *gatedLease) Lease(ctx context.Context, r sluice.Request, back redisstore.ReturnOp) (redisstore.Grant, error) {
	if g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		<-g.gate
	}
	return g.Store.Lease(ctx, r, back)
}

// waitBlocked returns once a goroutine running fn waits for a mutex.
func waitBlocked(fn string) {
	buf := make([]byte, 1<<20)
	for {
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, fn) && strings.Contains(g, "sync.(*Mutex).Lock") {
				return
			}
		}
		runtime.Gosched()
	}
}

// TestLeaseCloseDuringTakeAll: Close during a TakeAll that holds one key
// and goes on to the next must not deadlock (Close used to hold the keys'
// lock while waiting for the key the TakeAll held, which then waited for
// the keys' lock).
func TestLeaseCloseDuringTakeAll(t *testing.T) {
	srv := redistest.StartServer(t)
	g := &gatedLease{Store: openRedis(t, redisstore.Options{Addrs: []string{srv.Addr}}), entered: make(chan struct{}), gate: make(chan struct{})}
	l, err := NewLease(g, LeaseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := sluice.Request{Key: "a", Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(10), Cost: 1, Now: sluicetest.T0}
	b := r
	b.Key = "b"
	g.armed.Store(true)
	took := make(chan error, 1)
	go func() {
		ds := make([]sluice.Decision, 2)
		err := l.TakeAll(context.Background(), []sluice.Request{r, b}, ds)
		if err == nil && !sluice.AllAllowed(ds) {
			t.Errorf("TakeAll = %+v; want both allowed", ds)
		}
		took <- err
	}()
	<-g.entered // the TakeAll holds a, reserving for it
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	waitBlocked("(*Lease).Close") // Close waits for a
	close(g.gate)
	if err := <-took; err != nil {
		t.Fatalf("TakeAll: %v", err)
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
}
