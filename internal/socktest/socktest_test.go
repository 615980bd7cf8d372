package socktest_test

import (
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/socktest"
)

// Dir's directory is short enough for a socket, and Client reaches the
// socket whatever the URL's host.
func TestClientReachesSocket(t *testing.T) {
	dir := socktest.Dir(t)
	sock := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "over the socket") })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	resp, err := socktest.Client(sock, 30*time.Second).Get("http://anything.invalid/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if b, _ := io.ReadAll(resp.Body); string(b) != "over the socket" {
		t.Errorf("body %q, want %q", b, "over the socket")
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
}
