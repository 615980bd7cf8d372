package redistest

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/rueidis"
)

// Holder is a TCP relay between a client and Redis that delays commands.
// While holding, it keeps every write that contains its marker from Redis;
// Release passes them on and waits until Redis has answered each: commands
// that reach Redis late, after their client gave up on them, as from a
// stuck network path or a Redis paused with commands in its socket buffer.
// A held command reaches Redis even if its client has closed the
// connection meanwhile (Redis runs what it read before the close). Each
// held command must be the only one in flight on its connection, so that
// the next reply is its own.
type Holder struct {
	relay // Addr: where clients connect, 127.0.0.1:PORT

	marker []byte
	stop   chan struct{} // closed when the test ends

	mu      sync.Mutex
	holding bool
	release chan struct{} // closed by Release
	held    int
	first   chan struct{}  // closed when the first write is held since Hold
	landed  sync.WaitGroup // held writes not yet answered by Redis
}

// NewHolder relays to the Redis at addr until the test ends; it holds
// nothing until Hold.
func NewHolder(tb testing.TB, addr, marker string) *Holder {
	tb.Helper()
	x := &Holder{marker: []byte(marker), stop: make(chan struct{})}
	x.start(tb, addr, nil, func(c, s net.Conn) {
		var awaiting atomic.Bool // forward passed on a held write: back signals its reply
		answered := make(chan struct{}, 1)
		backDone := make(chan struct{})
		x.wg.Go(func() { x.back(c, s, &awaiting, answered, backDone) })
		x.wg.Go(func() { x.forward(c, s, &awaiting, answered, backDone) })
	})
	// Cleanups run last first: stop is closed before the relay ends.
	tb.Cleanup(func() { close(x.stop) })
	return x
}

// Hold starts holding the writes that contain the marker.
func (x *Holder) Hold() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.holding, x.release, x.first = true, make(chan struct{}), make(chan struct{})
}

// Held returns a channel closed once a write has been held since the
// last Hold (nil before any Hold): its client is then waiting on Redis.
func (x *Holder) Held() <-chan struct{} {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.first
}

// Release stops holding, passes the held writes on to Redis, and returns
// once Redis has answered each (or its connection to Redis is gone), with
// how many there were.
func (x *Holder) Release() int {
	x.mu.Lock()
	n := x.held
	x.holding, x.held = false, 0
	if x.release != nil {
		close(x.release)
		x.release = nil
	}
	x.mu.Unlock()
	x.landed.Wait()
	return n
}

// forward passes the client's writes on; one that contains the marker while
// x holds waits for Release, then for Redis's answer to it, before the next
// read from the client (which may have closed the connection meanwhile).
func (x *Holder) forward(c, s net.Conn, awaiting *atomic.Bool, answered, backDone chan struct{}) {
	defer s.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		x.mu.Lock()
		var release chan struct{}
		if x.holding && bytes.Contains(buf[:n], x.marker) {
			release = x.release
			select {
			case <-x.first:
			default:
				close(x.first)
			}
			x.held++
			x.landed.Add(1)
		}
		x.mu.Unlock()
		if release == nil {
			if _, err := s.Write(buf[:n]); err != nil {
				return
			}
			continue
		}
		select {
		case <-release:
		case <-x.stop:
			x.landed.Done()
			return
		}
		awaiting.Store(true)
		_, err = s.Write(buf[:n])
		if err == nil {
			select {
			case <-answered:
			case <-backDone:
			case <-x.stop:
			}
		}
		x.landed.Done()
		if err != nil {
			return
		}
	}
}

// back passes Redis's replies on (to a client that may be gone: the replies
// are read all the same), and signals the first reply after forward passed
// on a held write.
func (x *Holder) back(c, s net.Conn, awaiting *atomic.Bool, answered, backDone chan struct{}) {
	defer close(backDone)
	defer c.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := s.Read(buf)
		if err != nil {
			return
		}
		if awaiting.CompareAndSwap(true, false) {
			answered <- struct{}{}
		}
		c.Write(buf[:n])
	}
}

// Client is a Redis client through x (one connection, no client-side
// cache, so that each command crosses the relay), closed when the test
// ends.
func (x *Holder) Client(tb testing.TB) rueidis.Client {
	tb.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{x.Addr}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}
