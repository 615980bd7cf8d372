package redisstore

import (
	"context"
	"net"
	"testing"
)

// TestPendingDialAfterAbandon: once New has given up, a dial its client
// starts after (rueidis tries a Sentinel's addresses one after another,
// so the next starts as soon as the one abandon closed fails) fails at
// once, as one under way does: it used to pass untracked, as the
// settled client's own, and hold a connection to a Redis that does not
// answer until the timeout.
func TestPendingDialAfterAbandon(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p := newPending()
	p.abandon()
	c, err := p.dialer(&handshakes{})(context.Background(), ln.Addr().String(), &net.Dialer{}, nil)
	if err == nil {
		c.Close()
		t.Fatalf("a dial after New gave up connected, want it refused at once")
	}
	// After settle, the clients' own dials (reconnections) go through.
	p = newPending()
	p.settle()
	c, err = p.dialer(&handshakes{})(context.Background(), ln.Addr().String(), &net.Dialer{}, nil)
	if err != nil {
		t.Fatalf("a dial after New settled: %v, want it connected", err)
	}
	c.Close()
}
