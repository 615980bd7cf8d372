package proxy_test

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/rules"
)

// A rule keyed by a query parameter counts the value the upstream reads:
// a pair that url.ParseQuery drops (a bad escape, a ';') and that the
// proxy therefore does not forward (httputil.ReverseProxy re-encodes such
// a query without it) must not be the one counted, or a client puts a
// fresh value there on each request and the limit of the value the
// upstream sees never applies.
func TestQueryKeyIsTheUpstreamsValue(t *testing.T) {
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(r.URL.Query().Get("api_key")))
	})
	f := start(t, setup{specs: []rules.Spec{
		{Name: "per-key", Key: []string{"query:api_key"}, Rate: "1/m", Algorithm: "fixed_window"},
	}, up: &upstream{srv: rec.srv}})
	for i, q := range []string{
		"api_key=victim",
		"api_key=%zz&api_key=victim",
		"x=a1;y&api_key=victim", // (a1;&api_key=victim names api_key in a pair with ';': refused, TestAmbiguousKeyRefused)
		"api_key=a2%3&api_key=victim",
	} {
		resp, body := get(t, f.proxy.URL+"/?"+q, nil)
		want := http.StatusOK
		if i > 0 {
			want = http.StatusTooManyRequests
		}
		if resp.StatusCode != want {
			t.Errorf("GET /?%s: %d %q, want %d (the upstream would read api_key=victim, over its limit)", q, resp.StatusCode, body, want)
		}
	}
	if n := rec.count(); n != 1 {
		t.Errorf("upstream saw %d requests with api_key=victim, want 1 (rate 1/m)", n)
	}
}

// A '#' in a request target starts a fragment for Node's and Express's
// URL parsers and for Puma, which read ?api_key=victim#1 as
// api_key=victim: a fresh fragment on each request must not make a fresh
// key. (A Go upstream reads victim#1: the query is counted under that
// too, rules' queryValues.)
func TestQueryKeyWithoutFragment(t *testing.T) {
	rec := newRecorder(t, nil)
	f := start(t, setup{specs: []rules.Spec{
		{Name: "per-key", Key: []string{"query:api_key"}, Rate: "1/m", Algorithm: "fixed_window"},
	}, up: &upstream{srv: rec.srv}})
	addr := strings.TrimPrefix(f.proxy.URL, "http://")
	for i, target := range []string{"/?api_key=victim", "/?api_key=victim#1", "/?api_key=victim#2&x=1"} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second)) // only turns a hang into a failure
		if _, err := c.Write([]byte("GET " + target + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err != nil {
			t.Fatalf("GET %s: %v", target, err)
		}
		want := http.StatusOK
		if i > 0 {
			want = http.StatusTooManyRequests
		}
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d (an upstream that drops the fragment reads api_key=victim, over its limit)", target, resp.StatusCode, want)
		}
	}
	if n := rec.count(); n != 1 {
		t.Errorf("upstream saw %d requests, want 1 (rate 1/m)", n)
	}
}
