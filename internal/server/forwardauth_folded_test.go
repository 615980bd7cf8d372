package server_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/memstore"
)

// TestForwardAuthFoldedValues: an original method that is no HTTP method
// (one token), or an original URI with a space, which no request line
// holds, is refused with 400 naming it. A proxy in front that joins a
// repeated header's lines into one, "POST, GET" or "/login, /x" (the
// gateway's value and the client's own), would otherwise have the
// request matched as a method or path no rule names, and never limited:
// two lines are refused as disagreeing, one joined line was decided.
// Nothing is counted for a refused request.
func TestForwardAuthFoldedValues(t *testing.T) {
	f := start(t, memstore.New(memstore.Options{}), "", nil)
	login := func(method, uri string) map[string]string {
		return map[string]string{"X-Forwarded-Method": method, "X-Forwarded-Uri": uri, "X-Forwarded-For": "203.0.113.9"}
	}
	for _, tc := range []struct{ hdr map[string]string }{
		{login("POST, GET", "/login")},
		{login("POST,GET", "/login")},
		{login("PO ST", "/login")},
		{login("(POST)", "/login")},
		{login("POST", "/login, /x")},
		{login("POST", "/login /x")},
		{map[string]string{"X-Original-Method": "POST, GET", "X-Original-URI": "/login", "X-Forwarded-For": "203.0.113.9"}},
	} {
		resp, body := forwardAuth(t, f, tc.hdr)
		method, uri := tc.hdr["X-Forwarded-Method"]+tc.hdr["X-Original-Method"], tc.hdr["X-Forwarded-Uri"]+tc.hdr["X-Original-URI"]
		bad := method
		if !strings.Contains(body, `\"`+method+`\"`) {
			bad = uri
		}
		if resp.StatusCode != 400 || !strings.Contains(body, `\"`+bad+`\"`) {
			t.Errorf("forward-auth %q %q: %d %q, want 400 naming the bad value", method, uri, resp.StatusCode, body)
		}
	}
	// The login rule (2 a minute per client) has counted nothing.
	for i := range 2 {
		if resp, body := forwardAuth(t, f, login("POST", "/login")); resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Remaining") != []string{"1", "0"}[i] {
			t.Fatalf("forward-auth POST /login %d after the refused ones: %d %q, remaining %q, want 200 with %d left", i+1, resp.StatusCode, body, resp.Header.Get("X-RateLimit-Remaining"), 1-i)
		}
	}
	// A method other than GET or POST, any token, is taken as it is.
	if resp, body := forwardAuth(t, f, login("PROPFIND", "/login")); resp.StatusCode != 200 {
		t.Errorf("forward-auth PROPFIND /login: %d %q, want 200", resp.StatusCode, body)
	}
}
