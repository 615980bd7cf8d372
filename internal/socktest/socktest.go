// Package socktest helps tests that listen on Unix sockets: a directory
// short enough for a socket's path, and an HTTP client that dials one.
package socktest

import (
	"context"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

// Dir returns a new directory for sockets, removed when the test ends.
// It is made under os.TempDir(), not t.TempDir(), whose paths, with a
// long test name, can pass the 107 bytes a socket's path may hold.
func Dir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// Client returns an HTTP/1.1 client whose every connection goes to the
// socket at path, whatever the request's host; timeout bounds each
// request.
func Client(path string, timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}}
}
