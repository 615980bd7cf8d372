package daemon

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
)

// TestNewContextStopsDial: a NewContext whose context ends while it dials
// a Redis that accepts and never answers (single, Sentinel and Cluster
// discovery, each with on_error: local and deny, under which such a Redis
// does not stop the start) returns at once with the context's error and
// no daemon. store.redis.timeout is a minute, its largest, past the hang
// guard: a NewContext that waited for the dial to give up fails the test.
func TestNewContextStopsDial(t *testing.T) {
	for _, c := range []struct{ name, redis string }{
		{"single", ""},
		{"sentinel", ", sentinel: mymaster"},
		{"cluster", ", cluster: true"},
	} {
		for _, onError := range []string{"local", "deny"} {
			t.Run(c.name+"/"+onError, func(t *testing.T) {
				addr, accepted := silentListener(t)
				cfg, err := config.Parse("sluice.yaml", []byte("listen: 127.0.0.1:0\nstore: {type: redis, on_error: "+onError+
					", redis: {addrs: ["+addr+"], timeout: 1m"+c.redis+"}}\nrules:\n  - {name: r, rate: 10/m}\n"))
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				type result struct {
					d   *Daemon
					err error
				}
				done := make(chan result, 1)
				go func() {
					d, err := NewContext(ctx, cfg, Options{})
					done <- result{d, err}
				}()
				select {
				case <-accepted:
				case r := <-done:
					t.Fatalf("NewContext returned (%v) before it dialled Redis", r.err)
				}
				cancel()
				var r result
				select {
				case r = <-done:
				case <-time.After(safety): // a hang guard, shorter than the dial's timeout
					t.Fatalf("NewContext still dialling %v after its context ended (store.redis.timeout 1m)", safety)
				}
				if r.d != nil {
					r.d.Close()
					t.Fatalf("NewContext after its context ended: a daemon (err %v), want none", r.err)
				}
				if !errors.Is(r.err, context.Canceled) || !strings.Contains(r.err.Error(), addr) {
					t.Errorf("NewContext after its context ended: %v, want context.Canceled naming %s", r.err, addr)
				}
			})
		}
	}
}

// TestNewContextDoneBeforeStart: a NewContext whose context has ended
// already builds nothing, whatever the store.
func TestNewContextDoneBeforeStart(t *testing.T) {
	addr, _ := silentListener(t)
	for _, yaml := range []string{
		"listen: 127.0.0.1:0\n",
		"listen: 127.0.0.1:0\nstore: {type: redis, on_error: local, redis: {addrs: [" + addr + "], timeout: 1m}}\n",
	} {
		cfg, err := config.Parse("sluice.yaml", []byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		d, err := NewContext(ctx, cfg, Options{})
		if d != nil {
			d.Close()
		}
		if d != nil || !errors.Is(err, context.Canceled) {
			t.Errorf("NewContext on a done context, %q: daemon %v, %v, want none and context.Canceled", yaml, d != nil, err)
		}
	}
}

// silentListener accepts connections and never answers; accepted is
// closed at the first. The test's end closes it all.
func silentListener(t *testing.T) (addr string, accepted chan struct{}) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted = make(chan struct{})
	var (
		mu    sync.Mutex
		conns []net.Conn
		once  sync.Once
	)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			once.Do(func() { close(accepted) })
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String(), accepted
}
