package proxy

import (
	"io"
	"net"
	"testing"
	"testing/synctest"
	"time"
)

// A tunnel is closed once nothing has passed through it, either way, for
// its idle timeout: bytes read or written put the close off by as much
// again, counted from the last of them.
func TestTunnelIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const idle = time.Minute
		a, b := net.Pipe()
		defer b.Close()
		go io.Copy(b, b) // the upstream echoes
		start := time.Now()
		tn := newTunnel(a, idle)
		buf := make([]byte, 1)
		ping := func(at time.Duration) {
			t.Helper()
			time.Sleep(start.Add(at).Sub(time.Now()))
			if _, err := tn.Write([]byte("x")); err != nil {
				t.Fatalf("at %v: write: %v, want the tunnel open", at, err)
			}
			if _, err := io.ReadFull(tn, buf); err != nil {
				t.Fatalf("at %v: read: %v, want the tunnel open", at, err)
			}
		}
		ping(0)
		ping(50 * time.Second)
		ping(100 * time.Second) // 100 s since it opened, 50 s since the last bytes
		time.Sleep(idle - time.Second)
		synctest.Wait()
		if _, err := tn.Write([]byte("x")); err != nil {
			t.Fatalf("59 s after the last bytes: write: %v, want the tunnel open", err)
		}
		io.ReadFull(tn, buf)
		time.Sleep(idle)
		synctest.Wait()
		if _, err := tn.Write([]byte("x")); err == nil {
			t.Fatalf("%v after the last bytes: the write passed, want the tunnel closed", idle)
		}
		tn.Close()
	})
}
