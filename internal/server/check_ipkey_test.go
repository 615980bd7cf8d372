package server_test

import (
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/memstore"
)

// A /v1/check key for a rule keyed by ip is a client address, counted as
// the rule counts clients: an IPv6 address by its /64, an IPv4-mapped one
// as the IPv4 address, so that it shares the counter of the requests
// forward auth (and the proxy) key by that client, as the docs promise.
// Counted as written, every address of one host's /64 was a fresh count:
// a gateway asking /v1/check with the client's address let an IPv6 client
// rotate through its /64 past the limit the rule sets on it.
func TestCheckIPKeyCountsTheClient(t *testing.T) {
	f := start(t, memstore.New(memstore.Options{}), "", nil) // login-per-ip: ip, 2/m
	for _, tc := range []struct {
		name      string
		forwarded string   // the client as forward auth is told it, once
		checked   []string // then asked about by /v1/check: one allowed, then refused
	}{
		{"ipv6 /64", "2001:db8:1:2::1", []string{"2001:db8:1:2::2", "2001:db8:1:2:ffff::9"}},
		{"ipv6 spellings", "2001:db8:5::1", []string{"2001:DB8:5:0:0:0:0:1", "2001:db8:5::0:1"}},
		{"ipv6 zone", "fe80::1", []string{"fe80::2%eth0", "fe80::3"}},
		{"ipv4-mapped", "203.0.113.7", []string{"::ffff:203.0.113.7", "203.0.113.7"}},
		{"the /64 as the proxy writes it", "2001:db8:9:9::1", []string{"2001:db8:9:9::/64", "2001:db8:9:9::5"}},
	} {
		hdr := map[string]string{"X-Forwarded-Method": "POST", "X-Forwarded-Uri": "/login", "X-Forwarded-For": tc.forwarded}
		if resp, body := forwardAuth(t, f, hdr); resp.StatusCode != 200 {
			t.Fatalf("%s: forward auth for %s: %d %q, want 200", tc.name, tc.forwarded, resp.StatusCode, body)
		}
		for i, key := range tc.checked {
			want := i == 0 // the rule's second of 2/m, then none
			status, cr := check(t, f, `{"rule":"login-per-ip","key":"`+key+`"}`)
			if status != 200 || cr.Allowed != want {
				t.Errorf("%s: /v1/check key %q after forward auth for %s: %d allowed %v, want 200 allowed %v (one client, one count)",
					tc.name, key, tc.forwarded, status, cr.Allowed, want)
			}
		}
	}
	// Other clients, and keys that are no address, keep their own counts.
	for _, key := range []string{"2001:db8:1:3::1", "203.0.113.8", "2001:db8::/48", "unix:", "not an address"} {
		if status, cr := check(t, f, `{"rule":"login-per-ip","key":"`+key+`"}`); status != 200 || !cr.Allowed || cr.Remaining != 1 {
			t.Errorf("/v1/check key %q: %d %+v, want 200 allowed with 1 left (a count of its own)", key, status, cr)
		}
	}
}

// The same holds for the other parts a rule's single key can be that have
// spellings: a /v1/check key for a rule keyed by path, header:Host or
// method is read as a request's part is, so a gateway that passes each
// request's path, host or method on shares forward auth's count, and a
// client that spells them another way (/login/, //login, /%6Cogin;
// A.Example:8000; head) gets no fresh count.
func TestCheckKeyReadAsTheRequestPart(t *testing.T) {
	srv := forwardAuthServer(t,
		rules.Spec{Name: "route", Key: []string{"path"}, Rate: "2/m", Algorithm: "fixed_window"},
		rules.Spec{Name: "site", Key: []string{"header:Host"}, Rate: "2/m", Algorithm: "fixed_window"},
		rules.Spec{Name: "verb", Key: []string{"method"}, Rate: "2/m", Algorithm: "fixed_window"},
		rules.Spec{Name: "cred", Key: []string{"header:Authorization"}, Rate: "2/m", Algorithm: "fixed_window"},
	)
	f := &fixture{srv: srv}
	hdr := map[string]string{"X-Forwarded-Method": "POST", "X-Forwarded-Uri": "/login", "X-Forwarded-Host": "a.example", "Authorization": "Bearer t"}
	if resp, body := forwardAuth(t, f, hdr); resp.StatusCode != 200 {
		t.Fatalf("forward auth: %d %q", resp.StatusCode, body)
	}
	for _, tc := range []struct {
		rule string
		keys []string // one allowed, then refused
	}{
		{"route", []string{"/login/", "//a/../login"}},
		{"site", []string{"A.Example:8000", "a.example."}},
		{"verb", []string{"post", "POST"}},
		{"cred", []string{"bearer t", "BEARER  t"}},
	} {
		for i, key := range tc.keys {
			status, cr := check(t, f, `{"rule":"`+tc.rule+`","key":"`+key+`"}`)
			if want := i == 0; status != 200 || cr.Allowed != want {
				t.Errorf("rule %s: /v1/check key %q after forward auth: %d allowed %v, want 200 allowed %v (one value, one count)", tc.rule, key, status, cr.Allowed, want)
			}
		}
	}
	// HEAD is GET's count, as for requests.
	for i, key := range []string{"GET", "head", "HEAD"} {
		if status, cr := check(t, f, `{"rule":"verb","key":"`+key+`"}`); status != 200 || cr.Allowed != (i < 2) {
			t.Errorf("rule verb: /v1/check key %q: %d allowed %v, want allowed %v", key, status, cr.Allowed, i < 2)
		}
	}
	// A key that is no path stays as written.
	if status, cr := check(t, f, `{"rule":"route","key":"login"}`); status != 200 || !cr.Allowed || cr.Remaining != 1 {
		t.Errorf("rule route: /v1/check key \"login\": %d %+v, want allowed with 1 left", status, cr)
	}
}

// A /v1/check key for a rule keyed by query:NAME or cookie:NAME alone is
// read as that part of a request is: its escapes decoded ('+' as a space),
// a cookie's double quotes stripped. A gateway passing the parameter or
// cookie as the request sent it (nginx's $arg_NAME and $cookie_NAME are
// raw) shared no count with forward auth, which counts the decoded value,
// and a client escaping its key another way each time (%61bc, %2561…)
// had a fresh count with every spelling while the app behind, which
// decodes it, read one key.
func TestCheckQueryCookieKeyReadAsTheRequestPart(t *testing.T) {
	srv := forwardAuthServer(t,
		rules.Spec{Name: "by-query", Key: []string{"query:api_key"}, Rate: "3/m", Algorithm: "fixed_window"},
		rules.Spec{Name: "by-cookie", Key: []string{"cookie:sid"}, Rate: "3/m", Algorithm: "fixed_window"},
	)
	f := &fixture{srv: srv}
	hdr := map[string]string{"X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/x?api_key=ab+c%2F", "Cookie": "sid=s%20t"}
	if resp, body := forwardAuth(t, f, hdr); resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Remaining") != "2" {
		t.Fatalf("forward auth: %d %q remaining %q", resp.StatusCode, body, resp.Header.Get("X-RateLimit-Remaining"))
	}
	for _, tc := range []struct {
		rule string
		keys []string // two allowed, then refused
	}{
		{"by-query", []string{"ab%20c/", "%61b+c%2f", "ab c/"}},
		{"by-cookie", []string{"s+t", `"s%20t"`, "s t"}},
	} {
		for i, key := range tc.keys {
			status, cr := check(t, f, `{"rule":"`+tc.rule+`","key":`+strconv.Quote(key)+`}`)
			if want := i < 2; status != 200 || cr.Allowed != want {
				t.Errorf("rule %s: /v1/check key %q after forward auth: %d allowed %v, want 200 allowed %v (one value, one count)", tc.rule, key, status, cr.Allowed, want)
			}
		}
	}
	// A key whose escapes do not decode is counted as written, as is
	// another value.
	for _, key := range []string{"ab%zz", "ab"} {
		if status, cr := check(t, f, `{"rule":"by-query","key":"`+key+`"}`); status != 200 || !cr.Allowed || cr.Remaining != 2 {
			t.Errorf("rule by-query: /v1/check key %q: %d %+v, want allowed with 2 left", key, status, cr)
		}
	}
}

// A /v1/check key for a rule keyed by several parts is taken as written,
// and shares the count of the requests forward auth (and the proxy) keys
// alike when it is written as they write it: each part's value as its
// length in bytes, ':' and the value, one after the other, in the rule's
// order (header:X-Api-Key then method: "2:k14:POST"), as the README says.
func TestCheckMultiPartKeyAsWritten(t *testing.T) {
	srv := forwardAuthServer(t,
		rules.Spec{Name: "pair", Key: []string{"header:X-Api-Key", "method"}, Rate: "2/m", Algorithm: "fixed_window"},
	)
	f := &fixture{srv: srv}
	hdr := map[string]string{"X-Forwarded-Method": "POST", "X-Forwarded-Uri": "/x", "X-Api-Key": "k1"}
	if resp, body := forwardAuth(t, f, hdr); resp.StatusCode != 200 {
		t.Fatalf("forward auth: %d %q", resp.StatusCode, body)
	}
	for i, key := range []string{"2:k14:POST", "2:k14:POST"} {
		status, cr := check(t, f, `{"rule":"pair","key":"`+key+`"}`)
		if want := i == 0; status != 200 || cr.Allowed != want {
			t.Errorf("/v1/check key %q after forward auth for k1 POST: %d allowed %v, want 200 allowed %v (the request's count)", key, status, cr.Allowed, want)
		}
	}
	// Written another way, a key is a count of its own.
	for _, key := range []string{"k1|POST", "2:k14:post"} {
		if status, cr := check(t, f, `{"rule":"pair","key":"`+key+`"}`); status != 200 || !cr.Allowed || cr.Remaining != 1 {
			t.Errorf("/v1/check key %q: %d %+v, want allowed with 1 left (a count of its own)", key, status, cr)
		}
	}
}
