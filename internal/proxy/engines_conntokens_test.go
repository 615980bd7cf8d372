package proxy_test

import (
	"bufio"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// A Connection header that names many headers costs the proxy time in
// proportion to the message, both ways, on every HTTP/1.1 engine, as
// ReverseProxy's removal of them does: each named header is dropped, the
// others pass. (The fast path once looked up the whole Connection list
// for each header, a cost of the product: a request of half a megabyte
// held a core for a minute, past this test's hang detector.)
func TestEngineManyConnectionTokens(t *testing.T) {
	const n = 50_000 // about 0.9 MB of head each way, within both sides' 1 MB bounds
	names := make([]string, n)
	for i := range names {
		names[i] = "X" + strconv.FormatInt(int64(i), 36)
	}
	up := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		for _, k := range names {
			h["R"+k] = []string{"v"}
		}
		h["Connection"] = []string{"r" + strings.Join(names, ", r")}
		h["X-Resp-Kept"] = []string{"yes"}
		io.WriteString(w, "ok")
	})
	var head strings.Builder
	head.WriteString("GET /many HTTP/1.1\r\nHost: x\r\nX-Kept: yes\r\nConnection: " + strings.ToLower(strings.Join(names, ",")) + "\r\n")
	for _, k := range names {
		head.WriteString(k + ": v\r\n")
	}
	head.WriteString("\r\n")
	forEngine(t, true, func(t *testing.T, ec engineCase) {
		s := startOn(t, ec, up.srv.URL, engineOpts{})
		conn := s.dial(t) // its deadline (safety) is the hang detector
		if _, err := io.WriteString(conn, head.String()); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("answer: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(b) != "ok" {
			t.Fatalf("answer %d %q, want 200 \"ok\"", resp.StatusCode, b)
		}
		got, _ := up.last(t)
		named := 0
		for _, k := range names {
			if _, ok := got.Header[k]; ok {
				named++
			}
			if _, ok := resp.Header["R"+k]; ok {
				named++
			}
		}
		if named > 0 || got.Header.Get("X-Kept") != "yes" || resp.Header.Get("X-Resp-Kept") != "yes" {
			t.Errorf("%d headers Connection named passed; X-Kept %q, X-Resp-Kept %q: want none, yes, yes", named, got.Header.Get("X-Kept"), resp.Header.Get("X-Resp-Kept"))
		}
	})
}
