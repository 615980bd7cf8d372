package h1_test

import (
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The front reuses a connection's request (its URL, header map and
// values) and its answer's header maps from request to request: nothing
// of one request or answer shows in the next. Requests of different
// shapes (many header lines, few, repeated and lower-case names; headers
// set after WriteHeader, which net/http ignores) pipelined on one
// connection get the answers net/http's server gives them.
func TestReuseBetweenRequests(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b strings.Builder
		b.WriteString(r.Method + " " + r.RequestURI + " " + r.URL.Path + " " + r.URL.RawQuery + " " + r.Host + " " + r.Proto + " " + strconv.FormatBool(r.Close) + "\n")
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range r.Header {
				if !yield(k) {
					return
				}
			}
		}) {
			b.WriteString(k + ": " + strings.Join(r.Header[k], " | ") + "\n")
		}
		// Answer headers named by the request: none of a previous
		// answer's may show.
		for _, k := range r.Header["X-Set"] {
			w.Header().Set(k, r.URL.Path)
		}
		if r.URL.Path == "/late" {
			w.WriteHeader(http.StatusAccepted) // the head is decided after the body (sniffed, length)
			w.Header().Set("X-Late", "not sent")
			w.Header()["X-Set"] = []string{"not sent either"}
		}
		io.WriteString(w, b.String())
	})
	plain, front := serveBoth(t, h)
	lines := func(n int, name string) string {
		var b strings.Builder
		for i := range n {
			b.WriteString(name + strconv.Itoa(i%5) + ": v" + strconv.Itoa(i) + "\r\n")
		}
		return b.String()
	}
	reqs := []string{
		"GET /many?a=1 HTTP/1.1\r\nHost: x\r\n" + lines(40, "x-dup-") + "X-Set: A\r\nx-set: B\r\n\r\n",
		"GET /few HTTP/1.1\r\nHost: y\r\n\r\n",
		"HEAD /head?q HTTP/1.1\r\nhost: z\r\nACCEPT: */*\r\nuser-AGENT: t\r\n\r\n",
		"GET /late HTTP/1.1\r\nHost: x\r\nX-Set: C\r\n" + lines(17, "H") + "\r\n",
		"GET /seventeen HTTP/1.1\r\nHost: x\r\n" + lines(17, "X-Forwarded-") + "\r\n",
		"GET /last HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
	}
	methods := []string{"GET", "GET", "HEAD", "GET", "GET", "GET"}
	raw := strings.Join(reqs, "")
	a, b := exchange(t, plain, raw, methods...), exchange(t, front, raw, methods...)
	if len(a) != len(reqs) || len(b) != len(reqs) {
		t.Fatalf("%d answers from net/http, %d from the front; want %d", len(a), len(b), len(reqs))
	}
	for i := range a {
		same(t, short(reqs[i]), a[i], b[i])
	}
	// One at a time too (each request waits for the answer before it).
	for i, r := range reqs[:len(reqs)-1] {
		a, b := exchange(t, plain, r+reqs[len(reqs)-1], methods[i], "GET"), exchange(t, front, r+reqs[len(reqs)-1], methods[i], "GET")
		for j := range a {
			same(t, short(r), a[j], b[j])
		}
	}
}

// What a handler keeps of a request after it returns, as the contract
// allows (header values, the path: strings), stays what was sent while
// the connection serves the next requests; a body kept stays closed
// (http.ErrBodyReadAfterClose) while the next request's body is read,
// as a transport still holding it would read it.
func TestKeptValuesStay(t *testing.T) {
	type kept struct {
		path, value string
		fast        bool
		prevBody    error // reading the previous POST's body, in this one's handler
	}
	var (
		mu       sync.Mutex
		all      []kept
		lastBody io.Reader
	)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		k := kept{path: r.URL.Path, value: r.Header.Get("X-Key"), fast: fastBody(r)}
		if r.Method == "POST" {
			if lastBody != nil {
				_, k.prevBody = lastBody.Read(make([]byte, 4))
			}
			lastBody = r.Body
		}
		b, _ := io.ReadAll(r.Body)
		all = append(all, k)
		w.Write(b)
	})
	_, front := serveBodies(t, h, 64)
	var raw strings.Builder
	var methods []string
	for i := range 20 {
		m := "GET"
		if i%2 == 1 {
			m = "POST"
		}
		raw.WriteString(m + " /p" + strconv.Itoa(i) + " HTTP/1.1\r\nHost: x\r\nx-key: k" + strconv.Itoa(i) + "\r\n")
		if m == "POST" {
			body := strconv.Itoa(i)
			raw.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
		} else {
			raw.WriteString("\r\n")
		}
		methods = append(methods, m)
	}
	for i, r := range exchange(t, front, raw.String(), methods...) {
		if r.readErr != nil {
			t.Fatalf("answer %d: %v", i, r.readErr)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(all) != 20 {
		t.Fatalf("%d requests served; want 20", len(all))
	}
	for i, k := range all {
		if want := "/p" + strconv.Itoa(i); k.path != want {
			t.Errorf("request %d: path kept %q; want %q", i, k.path, want)
		}
		if want := "k" + strconv.Itoa(i); k.value != want {
			t.Errorf("request %d: X-Key kept %q; want %q", i, k.value, want)
		}
		if i%2 == 1 && !k.fast {
			t.Fatalf("request %d: handed off; want it served by the front", i)
		}
		if i >= 3 && i%2 == 1 && !errors.Is(k.prevBody, http.ErrBodyReadAfterClose) {
			t.Errorf("request %d: the previous body read in its handler: %v; want http.ErrBodyReadAfterClose", i, k.prevBody)
		}
	}
}
