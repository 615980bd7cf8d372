package h1_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"testing"
)

// A request on the front carries what net/http's server puts in a
// request's context: http.ServerContextKey (the *http.Server) and
// http.LocalAddrContextKey. Handlers go by them: ReverseProxy aborts the
// answer (panics with http.ErrAbortHandler) on an upstream that breaks
// off only "under an HTTP server", that is, with ServerContextKey set;
// without it a chunked answer cut short was ended as if it were whole.
func TestContextAsNetHTTP(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			http.ReadRequest(bufio.NewReader(c))
			io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\na\r\n0123456789\r\n")
			c.Close() // cut: no last chunk
		}
	}()
	srv := &http.Server{}
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.Out.URL.Scheme, pr.Out.URL.Host = "http", up.Addr().String()
	}}
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ctx" {
			s, _ := r.Context().Value(http.ServerContextKey).(*http.Server)
			a, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
			if s != srv || a == nil || a.String() != r.Host {
				t.Errorf("context: server %p (want %p), local address %v (want %s)", s, srv, a, r.Host)
			}
			return
		}
		rp.ServeHTTP(w, r)
	})
	addr := serveWith(t, srv, true)
	get := func(path string) (string, error) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	get("/ctx")
	if b, err := get("/cut"); err == nil {
		t.Errorf("an answer the upstream cut short read %q as whole, want an error", b)
	}
}
