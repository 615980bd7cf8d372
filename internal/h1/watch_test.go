package h1_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
	"testing"

	"github.com/sluicehq/sluice/internal/h1"
)

// Watch: a client that closes cancels the watched context; one that sends
// its next request meanwhile loses no byte of it.
func TestWatch(t *testing.T) {
	goneSeen := make(chan bool, 1)
	entered := make(chan struct{}, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, stop := h1.Watch(r.Context())
		defer stop()
		switch r.URL.Path {
		case "/gone":
			entered <- struct{}{}
			<-ctx.Done() // the test fails by its own timeout if this never comes
			goneSeen <- true
		case "/next":
			entered <- struct{}{}
			for c := 0; c < 2; c++ {
				// The next request arrives while watched; the read
				// of the watcher takes its first byte or not.
				runtime.Gosched()
			}
			if ctx.Err() != nil {
				t.Error("a client that sent its next request was taken for gone")
			}
		}
		io.WriteString(w, r.URL.Path)
	})
	front := serveWith(t, &http.Server{Handler: h}, true)

	c, _ := net.Dial("tcp", front)
	io.WriteString(c, "GET /gone HTTP/1.1\r\nHost: x\r\n\r\n")
	<-entered
	c.Close()
	<-goneSeen

	c2, _ := net.Dial("tcp", front)
	defer c2.Close()
	br := bufio.NewReader(c2)
	io.WriteString(c2, "GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
	<-entered
	io.WriteString(c2, "GET /after HTTP/1.1\r\nHost: x\r\n\r\n")
	for _, want := range []string{"/next", "/after"} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", want, err)
		}
		if b, _ := io.ReadAll(resp.Body); string(b) != want {
			t.Errorf("got %q; want %q", b, want)
		}
	}
}

// AfterFunc on the front's request context: stop before Close keeps f
// from running; Close runs the one set by a request in its handler; a
// context derived from the request's gets context.AfterFunc.
func TestAfterFunc(t *testing.T) {
	ran := make(chan string, 4)
	entered := make(chan struct{})
	stopped := make(chan bool, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/stop":
			stop := h1.AfterFunc(r.Context(), func() { ran <- "/stop" })
			stopped <- stop()
			if stop() {
				t.Error("stop returned true twice")
			}
		case "/derived":
			ctx, cancel := context.WithCancel(r.Context())
			stop := h1.AfterFunc(ctx, func() { ran <- "/derived" })
			cancel() // not the server closing: context.AfterFunc's doing
			if got := <-ran; got != "/derived" {
				t.Errorf("ran %q", got)
			}
			if stop() {
				t.Error("stop after f ran returned true")
			}
		case "/close":
			stop := h1.AfterFunc(r.Context(), func() { ran <- "/close" })
			entered <- struct{}{}
			<-r.Context().Done() // the server closes
			if got := <-ran; got != "/close" {
				t.Errorf("ran %q", got)
			}
			stopped <- stop()
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := h1.New(&http.Server{Handler: h})
	done := make(chan struct{})
	go func() { srv.Serve(ln); close(done) }()
	defer func() { srv.Close(); <-done }()

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for _, path := range []string{"/stop", "/derived"} {
		io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		io.Copy(io.Discard, resp.Body)
		if path == "/stop" && !<-stopped {
			t.Error("stop before Close returned false")
		}
	}
	io.WriteString(c, "GET /close HTTP/1.1\r\nHost: x\r\n\r\n")
	<-entered
	srv.Close()
	if <-stopped {
		t.Error("stop after Close ran f returned true")
	}
	select {
	case got := <-ran:
		t.Errorf("%q ran too", got)
	default:
	}
}
