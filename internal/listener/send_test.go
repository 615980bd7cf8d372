package listener_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/metrics/metricstest"
)

// bigAnswer writes size bytes in 4 KiB writes and reports on done the
// error its writes ended with (nil: all written).
func bigAnswer(size int, done chan<- error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := []byte(strings.Repeat("x", 4<<10))
		var err error
		for n := 0; n < size && err == nil; n += len(chunk) {
			_, err = w.Write(chunk)
		}
		if err == nil {
			err = http.NewResponseController(w).Flush()
		}
		done <- err
	})
}

// TestStalledReaderCut: a client that stops reading its answer holds the
// connection (and the handler, and through the proxy an upstream
// connection) not much longer than send_timeout: the write that makes no
// progress for that long fails, the connection is closed and counted
// slow — not a moment before.
func TestStalledReaderCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		done := make(chan error, 1)
		f := serve(t, bigAnswer(1<<20, done), listener.Options{SendTimeout: 10 * time.Second})
		c := f.ln.dial()
		defer c.Close()
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		// Read the head and a little of the body, then stop reading.
		br := bufio.NewReaderSize(c, 1024)
		if _, err := http.ReadResponse(br, nil); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		time.Sleep(10*time.Second - time.Nanosecond)
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("the handler's writes ended (%v) before send_timeout", err)
		default:
		}
		// On an in-memory connection (not raw I/O, where the bound is
		// exact: TestStalledReaderCutTCP) the cut comes within a second
		// send_timeout: the last read may have taken part of a Write.
		time.Sleep(10*time.Second + time.Nanosecond)
		synctest.Wait()
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("the handler wrote 1 MiB to a client that reads nothing")
			}
		default:
			t.Fatal("a client that stopped reading still holds the handler after send_timeout")
		}
		synctest.Wait()
		if _, err := io.Copy(io.Discard, br); err != nil && !isClosedPipe(err) {
			t.Errorf("reading the rest: %v", err)
		}
		synctest.Wait()
		if got := metric(t, f, "sluice_connections_closed_slow_total"); got != 1 {
			t.Errorf("sluice_connections_closed_slow_total = %v, want 1", got)
		}
		if got := metric(t, f, "sluice_connections_open"); got != 0 {
			t.Errorf("sluice_connections_open = %v, want 0", got)
		}
	})
}

// TestSlowReaderNotCut: a client that reads slowly but never pauses as
// long as send_timeout gets its whole answer, though it takes far longer
// than send_timeout in all.
func TestSlowReaderNotCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		done := make(chan error, 1)
		const size = 256 << 10
		f := serve(t, bigAnswer(size, done), listener.Options{SendTimeout: 10 * time.Second})
		c := f.ln.dial()
		defer c.Close()
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		var got []byte
		buf := make([]byte, 1000)
		start := time.Now()
		for len(got) < size+100 { // the head and the body, a read 9 s apart
			n, err := c.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				t.Fatalf("after %d bytes: %v", len(got), err)
			}
			if strings.HasSuffix(string(got), strings.Repeat("x", 4<<10)+"\r\n0\r\n\r\n") {
				break
			}
			time.Sleep(9 * time.Second)
		}
		if err := <-done; err != nil {
			t.Fatalf("the handler's writes failed: %v", err)
		}
		if time.Since(start) < 10*10*time.Second {
			t.Fatalf("the answer took %v: the test does not read slowly", time.Since(start))
		}
		if got := metric(t, f, "sluice_connections_closed_slow_total"); got != 0 {
			t.Errorf("sluice_connections_closed_slow_total = %v, want 0", got)
		}
	})
}

func isClosedPipe(err error) bool {
	return err == io.ErrClosedPipe || err == io.EOF || strings.Contains(err.Error(), "closed")
}

// TestSendTimeoutKeepsCallersDeadline: a deadline the caller set with
// SetDeadline (grpc-go bounds a new connection's handshake so, by its
// connection timeout) is in force for the writes as well: send_timeout
// neither replaces it nor lifts it.
func TestSendTimeoutKeepsCallersDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pl := newPipeListener()
		wl := listener.Wrap(pl, 0, time.Hour, nil)
		defer wl.Close()
		accepted := make(chan net.Conn, 1)
		go func() {
			c, err := wl.Accept()
			if err != nil {
				t.Error(err)
			}
			accepted <- c
		}()
		client := pl.dial() // never read
		defer client.Close()
		c := <-accepted
		defer c.Close()
		start := time.Now()
		c.SetDeadline(start.Add(10 * time.Second))
		_, err := c.Write([]byte("x"))
		if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
			t.Fatalf("write to a client that reads nothing: %v, want a timeout", err)
		}
		if took := time.Since(start); took != 10*time.Second {
			t.Errorf("the write failed after %v, want at the caller's deadline, 10s (send_timeout is 1h)", took)
		}
	})
}

// TestSendTimeoutCloses: a write cut by send_timeout closes the
// connection and counts it slow, whatever the server over it does after:
// grpc-go leaves a connection whose writes failed for its reader to
// close, and the reader of a client that goes on sending never fails.
func TestSendTimeoutCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		pl := newPipeListener()
		wl := listener.Wrap(pl, 0, 10*time.Second, metrics.New(reg).Listener("grpc"))
		defer wl.Close()
		accepted := make(chan net.Conn, 1)
		go func() {
			c, err := wl.Accept()
			if err != nil {
				t.Error(err)
			}
			accepted <- c
		}()
		client := pl.dial()
		defer client.Close()
		c := <-accepted
		defer c.Close()
		if _, err := c.Write([]byte("x")); err == nil {
			t.Fatal("a write to a client that reads nothing succeeded")
		}
		client.SetReadDeadline(time.Now().Add(time.Hour))
		if _, err := client.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("the client's read after the cut: %v, want EOF (the connection closed)", err)
		}
		m := metricstest.Gather(t, reg)
		if got := m[`sluice_connections_closed_slow_total{listener="grpc"}`]; got != 1 {
			t.Errorf("sluice_connections_closed_slow_total = %v, want 1", got)
		}
	})
}
