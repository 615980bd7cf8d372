package h1_test

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/h1"
)

// A request held longer than ReadHeaderTimeout (the proxy's action: delay,
// up to max_delay) is still watched: the header deadline, which the front
// leaves on the connection while the handler runs, must not end the
// watch, or a client that goes away after it goes unnoticed and its
// request goes on upstream. net/http lifts the header deadline once the
// head is read and notices the client at any time.
func TestWatchOutlivesHeaderTimeout(t *testing.T) {
	const rht = 50 * time.Millisecond
	for _, fast := range []bool{false, true} {
		name := "net/http"
		if fast {
			name = "front"
		}
		t.Run(name, func(t *testing.T) {
			held := make(chan struct{})
			gone := make(chan bool, 1)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ctx, stop := h1.Watch(r.Context())
				defer stop()
				// Held past the header deadline (set no later than the
				// request's first byte), as a delayed request is.
				<-time.After(2 * rht)
				close(held)
				select {
				case <-ctx.Done():
					gone <- true
				case <-time.After(10 * time.Second): // a bound, not a threshold: the test fails if it is reached
					gone <- false
				}
			})
			front, let := serveGated(t, &http.Server{Handler: h, ReadHeaderTimeout: rht}, fast)
			c, err := net.Dial("tcp", front)
			if err != nil {
				t.Fatal(err)
			}
			io.WriteString(c, "GET /held HTTP/1.1\r\nHost: x\r\n\r\n") // whole before the server accepts it (see gatedListener)
			let()
			select {
			case <-held:
			case <-time.After(time.Minute): // a bound, not a threshold: the test fails if it is reached
				t.Fatal("the request never reached the handler")
			}
			c.Close()
			if !<-gone {
				t.Errorf("the client closed its connection while its request was held past ReadHeaderTimeout: the watched context was never cancelled")
			}
		})
	}
}
