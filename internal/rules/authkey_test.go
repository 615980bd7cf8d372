package rules

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
)

// A header:Authorization key counts a credential, not its spelling. The
// scheme is case-insensitive (RFC 9110, 11.1), and servers read a Basic
// credential's base64 leniently (Go's BasicAuth: "basic", and bits past
// the last byte, "MR==" for "MQ=="; Python's b64decode: characters
// outside the alphabet and text after the padding): counted as written,
// each spelling of one credential was a fresh count.
func TestAuthorizationKeySpellings(t *testing.T) {
	r := mustCompile(t, Spec{Name: "cred", Rate: "1/s", Key: []string{"header:Authorization"}}).Rules[0]
	for _, group := range [][]string{
		{"Basic dXNlcjpwYXNzMQ==", "basic dXNlcjpwYXNzMQ==", "BASIC dXNlcjpwYXNzMQ==", "Basic dXNlcjpwYXNzMR==",
			"Basic  dXNlcjpwYXNzMQ== ", "Basic\tdXNlcjpwYXNzMQ==", "Basic dXNl!cjpw*YXNzMQ==", "Basic dXNlcjpwYXNzMQ==xyz", "Basic dXNlcjpwYXNzMQ"},
		{"Bearer tok.en-1", "bearer tok.en-1", "BEARER  tok.en-1", "bEaReR tok.en-1 "},
		{"Token abc", "token abc"},
	} {
		want, ok := r.KeyFor(request("GET", "/", "Authorization: "+group[0]), ip1)
		if !ok {
			t.Fatalf("%q: no key", group[0])
		}
		for _, v := range group[1:] {
			req := request("GET", "/")
			req.Header["Authorization"] = []string{v}
			if got, ok := r.KeyFor(req, ip1); !ok || got != want {
				t.Errorf("Authorization %q: key %q, %v; want %q, the key of %q", v, got, ok, want, group[0])
			}
			// POST /v1/check with it counts on the same counter.
			if got := r.StoreKey(v); got != want {
				t.Errorf("StoreKey(%q) = %q, want %q", v, got, want)
			}
			// Beside the first spelling: one credential, one key.
			req.Header["Authorization"] = []string{group[0], v}
			set := &Set{Rules: []*Rule{r}}
			if ms, err := set.Match(req, ip1, nil); err != nil || len(ms) != 1 || ms[0].Key != want {
				t.Errorf("Authorization %q beside %q: Match = %v, %v; want one match keyed %q", v, group[0], ms, err, want)
			}
		}
	}
	// Other credentials keep their own counts: tokens are case-sensitive,
	// and so is what a Basic credential decodes to.
	seen := map[string]string{}
	for _, v := range []string{"Bearer tok", "Bearer TOK", "Bearer tok2", "Basic dXNlcjpwYXNzMQ==", "Basic VXNlcjpwYXNzMQ==", "Basic dXNlcjpwYXNzMg==",
		"Token tok", "Bearer", "Basic", "Basic !!!", "Basic a", strings.Repeat("Bearer x", 50)} {
		k, ok := r.KeyFor(request("GET", "/", "Authorization: "+v), ip1)
		if !ok {
			t.Errorf("%q: no key", v)
			continue
		}
		if o, dup := seen[k]; dup {
			t.Errorf("Authorization %q and %q share the key %q", o, v, k)
		}
		seen[k] = v
	}
}

// The common spellings cost nothing: a key already in its form is the
// value itself.
func TestAuthorizationKeyNoAlloc(t *testing.T) {
	for _, v := range []string{"Bearer eyJhbGciOi.x.y", "Token abc", "Negotiate", ""} {
		if n := testing.AllocsPerRun(100, func() { _ = AuthorizationKey(v) }); n != 0 || AuthorizationKey(v) != v {
			t.Errorf("AuthorizationKey(%q) = %q with %v allocations, want it as it is, none", v, AuthorizationKey(v), n)
		}
	}
}

// FuzzAuthorizationKey: the key is its own key, and every value Go's
// Request.BasicAuth reads as one user and password has the key of their
// plain encoding.
func FuzzAuthorizationKey(f *testing.F) {
	for _, v := range []string{"Basic dXNlcjpwYXNzMQ==", "basic dXNlcjpwYXNzMR==", "Bearer  x ", "BASIC dXNl!cjpw==x", "Basic a", "Basic", "\tBasic\t=", "Digest a=b, c=d"} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		k := AuthorizationKey(v)
		if again := AuthorizationKey(k); again != k {
			t.Fatalf("AuthorizationKey(%q) = %q, whose key is %q", v, k, again)
		}
		r := &http.Request{Header: http.Header{"Authorization": {v}}}
		if u, p, ok := r.BasicAuth(); ok {
			if want := AuthorizationKey("Basic " + base64.StdEncoding.EncodeToString([]byte(u+":"+p))); k != want {
				t.Fatalf("AuthorizationKey(%q) = %q; BasicAuth reads it as %q:%q, whose key is %q", v, k, u, p, want)
			}
		}
	})
}
