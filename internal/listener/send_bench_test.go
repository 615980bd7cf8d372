package listener_test

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/listener"
)

// BenchmarkWrite: a 512-byte answer written to a client over loopback
// through the listener's connection, with and without send_timeout (the
// socket's buffer takes each at once, as it takes most answers): what the
// bound costs a write that never waits.
func BenchmarkWrite(b *testing.B) {
	for _, c := range []struct {
		name string
		send time.Duration
	}{{"no-send-timeout", 0}, {"send-timeout", time.Minute}} {
		b.Run(c.name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			_, wl := listener.Server(ln, http.NotFoundHandler(), listener.Options{SendTimeout: c.send})
			defer wl.Close()
			cc, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer cc.Close()
			go io.Copy(io.Discard, cc)
			sc, err := wl.Accept()
			if err != nil {
				b.Fatal(err)
			}
			defer sc.Close()
			msg := make([]byte, 512)
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := sc.Write(msg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
