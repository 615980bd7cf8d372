package daemon

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// POST /v1/check pipelined on one connection (HTTP/1.1): every request is
// answered, in order (each takes one unit, so remaining counts down), a
// malformed one in the middle gets its 400 in its place. (The front
// writes the answers to requests sent together at once: BatchAnswers,
// tested in package h1.)
func TestPipelinedChecks(t *testing.T) {
	td := startDaemon(t, "listen: 127.0.0.1:0\nrules:\n  - name: r\n    rate: 1000/h\n")
	addr := strings.TrimPrefix(td.api, "http://")
	const n, bad = 40, 17
	var raw strings.Builder
	for i := range n {
		body := `{"rule":"r","key":"k"}`
		if i == bad {
			body = `{"rule":"r","key":`
		}
		fmt.Fprintf(&raw, "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute)) // a bound, not a threshold
	if _, err := io.WriteString(c, raw.String()); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	want := int64(999)
	for i := range n {
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodPost})
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		if i == bad {
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("answer %d (malformed): %d %s, want 400", i, resp.StatusCode, body)
			}
			continue
		}
		var a checkAnswer
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &a) != nil || !a.Allowed || a.Remaining != want {
			t.Errorf("answer %d: %d %s, want allowed with remaining %d", i, resp.StatusCode, body, want)
		}
		want--
	}
}
