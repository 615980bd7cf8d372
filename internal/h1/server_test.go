package h1_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/h1"
)

// serveBoth serves h twice until the test ends: by a plain net/http
// server, and by the fast front over one. It returns their addresses.
func serveBoth(t *testing.T, h http.Handler) (plain, front string) {
	t.Helper()
	return serveWith(t, &http.Server{Handler: h}, false), serveWith(t, &http.Server{Handler: h}, true)
}

func serveWith(t *testing.T, srv *http.Server, fast bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveOn(t, srv, fast, ln)
}

// serveOn serves srv on ln (by the front if fast) until the test ends, and
// returns ln's address.
func serveOn(t *testing.T, srv *http.Server, fast bool, ln net.Listener) string {
	t.Helper()
	done := make(chan struct{})
	if fast {
		f := h1.New(srv)
		go func() { f.Serve(ln); close(done) }()
		t.Cleanup(func() { f.Close(); <-done })
	} else {
		go func() { srv.Serve(ln); close(done) }()
		t.Cleanup(func() { srv.Close(); <-done })
	}
	return ln.Addr().String()
}

// exchange sends raw on a new connection, half-closes it (unless keep) and
// returns the responses read for each request in reqs.
func exchange(t *testing.T, addr, raw string, methods ...string) []*resp {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute)) // a bound, not a threshold: a hang fails
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var out []*resp
	for _, m := range methods {
		r, err := http.ReadResponse(br, &http.Request{Method: m})
		if err != nil {
			return append(out, &resp{readErr: err})
		}
		body, err := io.ReadAll(r.Body)
		out = append(out, &resp{r: r, body: string(body), bodyErr: err != nil})
	}
	return out
}

type resp struct {
	readErr error // no answer could be read
	r       *http.Response
	body    string
	bodyErr bool
}

// same fails unless a and b are the same answer (Date aside).
func same(t *testing.T, what string, a, b *resp) {
	t.Helper()
	if a.readErr != nil || b.readErr != nil {
		if (a.readErr == nil) != (b.readErr == nil) {
			t.Errorf("%s: net/http's answer read with error %v; the front's with %v", what, a.readErr, b.readErr)
		}
		return
	}
	ha, hb := a.r.Header.Clone(), b.r.Header.Clone()
	delete(ha, "Date")
	delete(hb, "Date")
	if a.r.Status != b.r.Status || a.r.Proto != b.r.Proto || !reflect.DeepEqual(ha, hb) || a.body != b.body || a.bodyErr != b.bodyErr ||
		a.r.Close != b.r.Close || !reflect.DeepEqual(a.r.TransferEncoding, b.r.TransferEncoding) ||
		a.r.ContentLength != b.r.ContentLength || !reflect.DeepEqual(a.r.Trailer, b.r.Trailer) ||
		len(a.r.Header["Date"]) != len(b.r.Header["Date"]) {
		t.Errorf("%s:\nnet/http: %d %v %q te=%v cl=%d close=%v trailer=%v bodyErr=%v\nfront:    %d %v %q te=%v cl=%d close=%v trailer=%v bodyErr=%v", what,
			a.r.StatusCode, a.r.Header, short(a.body), a.r.TransferEncoding, a.r.ContentLength, a.r.Close, a.r.Trailer, a.bodyErr,
			b.r.StatusCode, b.r.Header, short(b.body), b.r.TransferEncoding, b.r.ContentLength, b.r.Close, b.r.Trailer, b.bodyErr)
	}
}

// echo answers with what it got, and whether it was served by the fast
// front (no body reader of net/http's: http.NoBody).
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	via := "net/http"
	if r.Body == http.NoBody && r.Method != "POST" {
		via = "either"
	}
	io.WriteString(w, r.Method+" "+r.RequestURI+" "+string(body)+" "+via)
})

// The front answers as net/http's server does for what handlers do:
// lengths, chunking, flushing, sniffing, HEAD, bodiless statuses, 1xx
// (without framing headers), trailers, HTTP/1.0, Connection: close, an aborted handler.
func TestAnswersAsNetHTTP(t *testing.T) {
	big := strings.Repeat("0123456789", 500)
	handlers := map[string]http.HandlerFunc{
		"/small": func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello\n") },
		"/typed": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, "{}")
		},
		"/html": func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "<html><body>x</body></html>") },
		"/nosniff": func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Content-Type"] = nil
			io.WriteString(w, "<html>")
		},
		"/encoded": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Encoding", "gzip")
			io.WriteString(w, "xx")
		},
		"/empty": func(w http.ResponseWriter, r *http.Request) {},
		"/big":   func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, big) },
		"/bigtwice": func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, big[:1500])
			io.WriteString(w, big[:1500])
		},
		"/length": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "5000")
			io.WriteString(w, big)
		},
		"/short": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "10")
			io.WriteString(w, "abc")
		},
		"/flush": func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "a")
			http.NewResponseController(w).Flush()
			io.WriteString(w, "b")
		},
		"/429": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "3")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(429)
			io.WriteString(w, `{"error":"rate_limited"}`+"\n")
		},
		"/599": func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(599) },
		"/204": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "3")
			w.WriteHeader(204)
		},
		"/304": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "a/b")
			w.WriteHeader(304)
		},
		"/103": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Link", "</a>")
			w.WriteHeader(103)
			io.WriteString(w, "ok")
		},
		"/103framed": func(w http.ResponseWriter, r *http.Request) {
			// A 1xx has no content: net/http leaves its framing out
			// (RFC 9112 §6.1: never a Transfer-Encoding on a 1xx).
			w.Header().Set("Link", "</a>")
			w.Header().Set("Content-Length", "2")
			w.Header().Set("Transfer-Encoding", "chunked")
			w.WriteHeader(103)
			w.Header().Del("Transfer-Encoding")
			io.WriteString(w, "ok")
		},
		"/trailer": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-Sum")
			io.WriteString(w, "data")
			w.Header().Set("X-Sum", "42")
			w.Header().Set(http.TrailerPrefix+"X-Late", "7")
		},
		"/close": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "close")
			io.WriteString(w, "bye")
		},
		"/newline": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-A", " a\r\nb ")
			io.WriteString(w, "x")
		},
		"/badname": func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Bad Name"] = []string{"x"}
			io.WriteString(w, "x")
		},
		"/echo": func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, r.Method+" "+r.RequestURI+" "+r.Host+" "+r.Proto+" "+r.Header.Get("X-A"))
		},
		"/abort": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "100")
			io.WriteString(w, "part")
			panic(http.ErrAbortHandler)
		},
		"/abortchunked": func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "part")
			http.NewResponseController(w).Flush()
			panic(http.ErrAbortHandler)
		},
		"/datefree": func(w http.ResponseWriter, r *http.Request) { w.Header()["Date"] = nil; io.WriteString(w, "x") },
		// Heads past the front's 4 KiB write buffer: lines that do not
		// fit its free space, one longer than the whole buffer, and a
		// trailer as long.
		"/bighead": func(w http.ResponseWriter, r *http.Request) {
			for i := range 60 {
				w.Header().Set("X-Field-"+strconv.Itoa(i), big[:i*7])
			}
			w.Header().Set("X-Huge", big)
			w.Header().Add("X-Huge", " "+big[:4090]+"\r\n")
			io.WriteString(w, "x")
		},
		"/bigtrailer": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-Sum, X-Other")
			io.WriteString(w, big[:3000])
			http.NewResponseController(w).Flush()
			w.Header().Set("X-Sum", big)
			w.Header().Set("X-Other", big[:4093])
		},
	}
	mux := http.NewServeMux()
	for p, h := range handlers {
		mux.Handle(p, h)
	}
	plain, front := serveBoth(t, mux)
	for p := range handlers {
		for _, m := range []string{"GET", "HEAD"} {
			for _, proto := range []string{"HTTP/1.1", "HTTP/1.0"} {
				raw := m + " " + p + " " + proto + "\r\nHost: example.com\r\nX-A: 1\r\n\r\n"
				a, b := exchange(t, plain, raw, m)[0], exchange(t, front, raw, m)[0]
				same(t, raw, a, b)
			}
		}
		raw := "GET " + p + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
		same(t, raw, exchange(t, plain, raw, "GET")[0], exchange(t, front, raw, "GET")[0])
	}
}

func short(s string) string {
	if len(s) > 40 {
		return s[:20] + "…" + s[len(s)-20:] + " (" + strconv.Itoa(len(s)) + " bytes)"
	}
	return s
}
