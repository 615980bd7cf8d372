package proxy_test

import (
	"bufio"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/internal/proxy"
)

// Bytes an upstream sends after an answer was read whole (past its
// Content-Length, or a body to a HEAD, written late) are no answer to the
// next request: the fast path must not reuse that connection and hand them
// to another client, as net/http's Transport does not ("Unsolicited
// response received on idle HTTP channel").
func TestUnsolicitedUpstreamBytes(t *testing.T) {
	goAhead, written := make(chan struct{}), make(chan struct{})
	var conns atomic.Int64
	up := serveConns(t, func(c net.Conn) {
		first := conns.Add(1) == 1 // the second is opened after the first's answer
		br := bufio.NewReader(c)
		for i := 0; ; i++ {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if first && i == 0 {
				c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
				<-goAhead
				// Nobody asked for this: the upstream is wrong, and
				// no client may get it.
				c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nSECRET"))
				close(written)
				continue
			}
			c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(req.URL.Path)) + "\r\n\r\n" + req.URL.Path))
		}
	})
	p := proxyTo(t, "http://"+up, proxy.Options{})
	if _, body := get(t, p.URL+"/a", nil); body != "ok" {
		t.Fatalf("first answer %q, want ok", body)
	}
	close(goAhead)
	<-written // in the proxy's socket: loopback delivers within the write
	if _, body := get(t, p.URL+"/bb", nil); body != "/bb" {
		t.Errorf("second answer %q, want /bb (the upstream's answer to it, not bytes it sent unasked before)", body)
	}
	// A connection with nothing unasked on it is reused.
	if _, body := get(t, p.URL+"/ccc", nil); body != "/ccc" || conns.Load() != 2 {
		t.Errorf("third answer %q on %d upstream connections; want /ccc on the second one, reused", body, conns.Load())
	}
}
