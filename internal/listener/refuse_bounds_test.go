package listener_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/metrics/metricstest"
)

// TestRefusedBeyondMaxRefusing: while 256 refused connections are being
// answered (each held until its request's head comes, here for longer
// than the test), a connection refused after them is closed at once,
// unanswered, and counted refused: the answers' cost is bounded, however
// many clients come. Those being answered still get their 503.
func TestRefusedBeyondMaxRefusing(t *testing.T) {
	const most = 256 // maxRefusing
	addr, wl, reg := tlsCappedWith(t, nil, refuseWait(10*safety))
	held := make([]net.Conn, most)
	for i := range held {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held[i] = c
	}
	waitFor(t, "the refused connections being answered", func() bool { return listener.Refusing(wl) == most })
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(safety))
	n, err := c.Read(make([]byte, 1))
	var ne net.Error
	if n > 0 || err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Errorf("a connection refused beyond %d being answered: read %d bytes, %v; want it closed at once", most, n, err)
	}
	if got := listener.Refusing(wl); got != most {
		t.Errorf("refused connections being answered: %d, want %d", got, most)
	}
	if got := metricstest.Gather(t, reg)[`sluice_connections_refused_total{listener="api"}`]; got != most+1 {
		t.Errorf("sluice_connections_refused_total = %v, want %d", got, most+1)
	}
	for _, c := range held[:3] {
		c.SetDeadline(time.Now().Add(safety))
		io.WriteString(c, "GET /v1/check HTTP/1.1\r\nHost: sluice\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("a refused connection being answered: %v, want a 503", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("a refused connection being answered: %d, want 503", resp.StatusCode)
		}
	}
	for _, c := range held {
		c.Close()
	}
	waitFor(t, "the refused connections done", func() bool { return listener.Refusing(wl) == 0 })
}
