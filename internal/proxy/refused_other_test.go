//go:build !unix

package proxy_test

import (
	"net"
	"testing"
)

// refusedAddr returns a loopback address nothing listens on (a closed
// listener's; elsewhere than unix the port is not held).
func refusedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	return ln.Addr().String()
}
