package redisstore_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// TestNewAbandonedDialLetsGo: a New whose context ends while it dials a
// Redis (or a Sentinel) that accepts and never answers returns with the
// context's error, and closes the connection it was making: rueidis's
// dial, which takes no context, used to hold it open (and a goroutine
// waiting on it) until the timeout, here a minute, twice the hang guard.
func TestNewAbandonedDialLetsGo(t *testing.T) {
	for _, c := range []struct {
		name string
		o    redisstore.Options
	}{
		{"single", redisstore.Options{}},
		{"sentinel", redisstore.Options{Sentinel: "mymaster"}},
		{"cluster", redisstore.Options{Cluster: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			accepted := make(chan net.Conn, 16)
			go func() {
				for {
					conn, err := ln.Accept()
					if err != nil {
						return
					}
					accepted <- conn
				}
			}()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			o := c.o
			o.Addrs, o.Timeout = []string{ln.Addr().String()}, time.Minute
			go func() {
				s, err := redisstore.New(ctx, o)
				if s != nil {
					s.Close()
				}
				done <- err
			}()
			conn := <-accepted
			defer conn.Close()
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) || !errors.Is(err, sluice.ErrStoreUnavailable) {
				t.Errorf("New after its context ended: %v, want context.Canceled and ErrStoreUnavailable", err)
			}
			// The client's side closed: a read at the server's ends (EOF).
			conn.SetReadDeadline(time.Now().Add(30 * time.Second)) // a hang guard, half the timeout
			b := make([]byte, 512)
			for {
				if _, err := conn.Read(b); err != nil {
					var ne net.Error
					if errors.As(err, &ne) && ne.Timeout() {
						t.Fatalf("the connection New abandoned still open 30s after New returned (timeout 1m)")
					}
					break
				}
			}
		})
	}
}
