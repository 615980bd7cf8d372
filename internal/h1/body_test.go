package h1_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/h1"
)

// fastBody reports whether r's body is the front's (read whole with the
// head) rather than net/http's.
func fastBody(r *http.Request) bool {
	_, ok := r.Body.(interface{ InMemory() bool })
	return ok
}

// serveBodies serves h by a plain net/http server and by the front with
// bodies up to max taken on its own path.
func serveBodies(t *testing.T, h http.Handler, max int64) (plain, front string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := h1.New(&http.Server{Handler: h})
	f.MaxBody = max
	done := make(chan struct{})
	go func() { f.Serve(ln); close(done) }()
	t.Cleanup(func() { f.Close(); <-done })
	return serveWith(t, &http.Server{Handler: h}, false), ln.Addr().String()
}

// bodyHandlers answer with what they make of the body; none says which
// path served it, so the answers compare.
var bodyHandlers = map[string]http.HandlerFunc{
	"/echo": func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		io.WriteString(w, r.Method+" "+strconv.FormatInt(r.ContentLength, 10)+" "+strings.Join(r.Header["Content-Length"], ",")+" "+string(b)+" "+strconv.Quote(errString(err)))
	},
	// The body left unread: the server skips it, the next request follows.
	"/ignore": func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ignored") },
	"/half": func(w http.ResponseWriter, r *http.Request) {
		var b [2]byte
		n, _ := io.ReadFull(r.Body, b[:])
		io.WriteString(w, string(b[:n]))
	},
	// A bound under the body's length: the handler answers 413 itself.
	"/limit": func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > 4 {
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			return
		}
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	},
	"/closed": func(w http.ResponseWriter, r *http.Request) {
		r.Body.Close()
		_, err := r.Body.Read(make([]byte, 8))
		io.WriteString(w, errString(err))
	},
	"/close": func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Connection", "close")
		io.WriteString(w, "bye")
	},
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// POST bodies on the front: the same answers as net/http's server for
// every framing — the ones the front takes and the ones it hands off
// (chunked, both framings, two or malformed lengths, Expect, over the
// bound) — alone, pipelined, and with a GET after them.
func TestBodiesAsNetHTTP(t *testing.T) {
	mux := http.NewServeMux()
	for p, h := range bodyHandlers {
		mux.Handle(p, h)
	}
	plain, front := serveBodies(t, mux, 16)
	post := func(path, headers, body string) string {
		return "POST " + path + " HTTP/1.1\r\nHost: x\r\n" + headers + "\r\n" + body
	}
	cl := func(body string) string { return "Content-Length: " + strconv.Itoa(len(body)) + "\r\n" }
	const next = "GET /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
	var cases []struct {
		raw     string
		methods []string
	}
	add := func(raw string, methods ...string) {
		cases = append(cases, struct {
			raw     string
			methods []string
		}{raw, methods})
	}
	for p := range bodyHandlers {
		for _, body := range []string{"", "a", "abcdef", strings.Repeat("x", 16), strings.Repeat("y", 17)} {
			add(post(p, cl(body), body)+next, "POST", "GET")
			add(post(p, cl(body), body)+post(p, cl(body)+"Connection: close\r\n", body), "POST", "POST")
			add("POST "+p+" HTTP/1.0\r\n"+cl(body)+"\r\n"+body, "POST")
		}
		add(post(p, "", "")+next, "POST", "GET") // no framing: no body
		add(post(p, "Transfer-Encoding: chunked\r\n", "3\r\nabc\r\n0\r\n\r\n")+next, "POST", "GET")
	}
	for _, h := range []string{
		"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n",
		"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n",
		"Content-Length: 3\r\nContent-Length: 3\r\n",
		"Content-Length: 3\r\nContent-Length: 4\r\n",
		"Content-Length: 3, 3\r\n",
		"Content-Length: +3\r\n",
		"Content-Length: -3\r\n",
		"Content-Length: 3 3\r\n",
		"Content-Length:\r\n",
		"Content-Length: 99999999999999999999\r\n",
		"Content-Length: 0003\r\n",
		"Content-Length: 3\r\nExpect: 100-continue\r\n",
	} {
		// The first answer only: what follows depends on how net/http
		// framed the body, and may wait for more.
		add(post("/echo", h, "0\r\n\r\n")+next, "POST") // a chunked body too
	}
	add("GET /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"+next, "GET", "GET")
	add("POST /echo HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", "POST") // no Host: 400
	for _, tc := range cases {
		a, b := exchange(t, plain, tc.raw, tc.methods...), exchange(t, front, tc.raw, tc.methods...)
		if len(a) != len(b) {
			t.Errorf("%q: %d answers from net/http, %d from the front", tc.raw, len(a), len(b))
			continue
		}
		for i := range a {
			same(t, short(tc.raw), a[i], b[i])
		}
	}
}

// Which path serves a body: the front when it came whole with its head
// and within the bound; net/http otherwise, and always with MaxBody 0.
// A body read after the handler returned fails, as on net/http.
func TestBodyPath(t *testing.T) {
	type seen struct {
		fast bool
		body io.Reader
	}
	got := make(chan seen, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{fastBody(r), r.Body}
		w.Write(b)
	})
	_, front := serveBodies(t, h, 16)
	_, wide := serveBodies(t, h, 1<<20)
	off := serveWith(t, &http.Server{Handler: h}, true)
	for _, tc := range []struct {
		addr, body string
		fast       bool
	}{
		{front, "0123456789abcdef", true},
		{front, "0123456789abcdefg", false}, // over the bound
		{off, "abc", false},
		{wide, strings.Repeat("b", 7<<10), true},
		{wide, strings.Repeat("b", 9<<10), false}, // within the bound, past the front's 8 KiB buffer
	} {
		raw := "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: " + strconv.Itoa(len(tc.body)) + "\r\nConnection: close\r\n\r\n" + tc.body
		r := exchange(t, tc.addr, raw, "POST")[0]
		if r.readErr != nil || r.body != tc.body {
			t.Fatalf("%s: %v, %s", short(raw), r.readErr, short(r.body))
		}
		s := <-got
		if s.fast != tc.fast {
			t.Errorf("%s on %s: served by the front %v; want %v", short(tc.body), tc.addr, s.fast, tc.fast)
		}
		if _, err := s.body.Read(make([]byte, 1)); s.fast && !errors.Is(err, http.ErrBodyReadAfterClose) {
			t.Errorf("a body read after the handler returned: %v; want http.ErrBodyReadAfterClose", err)
		}
	}
}

// A head whose body has not all come is handed off: the front never
// waits for a body, and the answer is whole whenever the rest arrives.
func TestBodyLateHandedOff(t *testing.T) {
	fast := make(chan bool, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fast <- fastBody(r)
		w.Write(b)
	})
	_, front := serveBodies(t, h, 64)
	c, err := net.Dial("tcp", front)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\nabc")
	io.WriteString(c, "def")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(resp.Body); string(b) != "abcdef" {
		t.Errorf("got %q; want the whole body", b)
	}
	<-fast // either path, by timing: the answer is what counts
}
