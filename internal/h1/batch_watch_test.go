package h1_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/h1"
)

// With BatchAnswers, an answer held for the next pipelined request goes
// out when that request's handler is about to wait (it asks for Watch, as
// forward auth does under action delay): earlier answers do not wait out
// a later request's delay, as on net/http.
func TestBatchAnswersNotHeldByAWait(t *testing.T) {
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/held" {
			ctx, stop := h1.Watch(r.Context())
			select {
			case <-release:
			case <-ctx.Done():
			}
			stop()
		}
		io.WriteString(w, r.URL.Path)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := h1.New(&http.Server{Handler: h})
	f.BatchAnswers = 16
	done := make(chan struct{})
	go func() { f.Serve(ln); close(done) }()
	t.Cleanup(func() { f.Close(); <-done })

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /first HTTP/1.1\r\nHost: x\r\n\r\nGET /held HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(10 * time.Second)) // a bound, not a threshold: /held waits until released
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		close(release)
		t.Fatalf("answer to /first while /held waits: %v (held back with it)", err)
	}
	if b, _ := io.ReadAll(resp.Body); string(b) != "/first" {
		t.Errorf("first answer %q, want /first", b)
	}
	close(release)
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("answer to /held: %v", err)
	}
	if b, _ := io.ReadAll(resp.Body); string(b) != "/held" {
		t.Errorf("second answer %q, want /held", b)
	}
}
