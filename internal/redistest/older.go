package redistest

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
)

// Older is a TCP relay between a client and Redis that makes Redis look
// older: in what Redis sends back, its INFO's "redis_version:REAL" reads
// "redis_version:VERSION". Nothing else changes (HELLO's reply still
// tells the real version): a client that reads INFO server to learn the
// version sees VERSION, for tests of what it does on an older server
// that is not installed here.
type Older struct {
	relay // Addr: where clients connect, 127.0.0.1:PORT

	from, to []byte
}

// NewOlder relays to the Redis at addr until the test ends, making it
// tell version. The real version is read from Redis; version must be as
// long (the reply's lengths stay right), such as "6.0.16" for 7.0.15.
func NewOlder(tb testing.TB, addr, version string) *Older {
	tb.Helper()
	info, err := Do(addr, "INFO", "server")
	if err != nil {
		tb.Fatal(err)
	}
	var real string
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, "redis_version:"); ok {
			real = strings.TrimSpace(v)
		}
	}
	if real == "" || len(real) != len(version) {
		tb.Fatalf("redistest: NewOlder: Redis at %s runs %q; %q must be as long", addr, real, version)
	}
	x := &Older{from: []byte("redis_version:" + real), to: []byte("redis_version:" + version)}
	x.start(tb, addr, nil, func(c, s net.Conn) {
		x.wg.Go(func() { io.Copy(s, c); s.Close() })
		x.wg.Go(func() { x.back(c, s); c.Close() })
	})
	return x
}

// back passes Redis's replies on, rewritten. A read that ends with the
// start of the version's line keeps that start until the next read
// completes it: a reply ends with "\r\n", never with such a start, so
// nothing a client waits for is kept.
func (x *Older) back(c, s net.Conn) {
	buf := make([]byte, 64<<10)
	var kept []byte
	for {
		n, err := s.Read(buf)
		if err != nil {
			if len(kept) > 0 {
				c.Write(kept)
			}
			return
		}
		out := bytes.ReplaceAll(append(kept, buf[:n]...), x.from, x.to)
		kept = nil
		for i := max(0, len(out)-len(x.from)+1); i < len(out); i++ {
			if bytes.HasPrefix(x.from, out[i:]) {
				kept = bytes.Clone(out[i:])
				out = out[:i]
				break
			}
		}
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}
