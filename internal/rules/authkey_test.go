package rules

import (
	"encoding/base64"
	"net/http"
	"runtime"
	"slices"
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
		// A lone last character decodes to no byte: Node's decoder
		// drops it, and reads these as user:pass.
		{"Basic dXNlcjpwYXNz", "Basic dXNlcjpwYXNzA", "Basic dXNlcjpwYXNz/", "Basic dXNlcjpwYXNzQ=="},
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
		// Node's reading of a URL-safe credential is the key of its
		// standard spelling, and differs from AuthorizationKey's.
		if w, ok := urlSafeAuthorizationKey(v); ok {
			std := strings.NewReplacer("-", "+", "_", "/").Replace(trimBlanks(v))
			if want := AuthorizationKey(std); w != want || w == k || AuthorizationKey(w) != w {
				t.Fatalf("urlSafeAuthorizationKey(%q) = %q; want %q, the key of %q, not %q", v, w, want, std, k)
			}
		}
		r := &http.Request{Header: http.Header{"Authorization": {v}}}
		if u, p, ok := r.BasicAuth(); ok {
			if want := AuthorizationKey("Basic " + base64.StdEncoding.EncodeToString([]byte(u+":"+p))); k != want {
				t.Fatalf("AuthorizationKey(%q) = %q; BasicAuth reads it as %q:%q, whose key is %q", v, k, u, p, want)
			}
		}
	})
}

// A Basic credential as long as net/http admits (a header of 1 MiB) is
// read in memory of the order of its length, in both alphabets: its
// characters gathered into a slice that grew as they came, encoded anew
// and the key copied twice, took 18 times its length for both readings
// of a URL-safe one (19 MB), some 8.5 now; the bound is 12.
func TestAuthorizationKeyMemoryBounded(t *testing.T) {
	for _, v := range []string{"Basic " + strings.Repeat("QUFB", 1<<18), "basic " + strings.Repeat("QU-_", 1<<18)} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		AuthorizationKey(v)
		urlSafeAuthorizationKey(v)
		runtime.ReadMemStats(&after)
		if got, limit := after.TotalAlloc-before.TotalAlloc, 12*uint64(len(v)); got > limit {
			t.Errorf("%.12q… of %d bytes: both readings allocated %d bytes, want at most %d", v, len(v), got, limit)
		}
	}
}

// A Basic credential in the URL-safe alphabet ('-' for '+', '_' for '/')
// is the credential to Node's Buffer base64 decoder, which the basic-auth
// module (Express, Passport) reads it with: counted only as Python's
// b64decode reads it (skipping '-' and '_'), each such spelling of a
// credential whose base64 holds a '+' or '/' was a fresh count at a Node
// app. The request is counted under both readings, as a query with a '#'
// is, so neither server's reading escapes the limit; a credential the
// two read alike has one key.
func TestAuthorizationKeyURLSafe(t *testing.T) {
	r := mustCompile(t, Spec{Name: "cred", Rate: "1/s", Key: []string{"header:Authorization"}}).Rules[0]
	set := &Set{Rules: []*Rule{r}}
	keys := func(vs ...string) []string {
		t.Helper()
		req := request("GET", "/")
		req.Header["Authorization"] = vs
		ms, err := set.Match(req, ip1, nil)
		if err != nil {
			t.Fatalf("%q: %v", vs, err)
		}
		var ks []string
		for _, m := range ms {
			ks = append(ks, m.Key)
		}
		return ks
	}
	for std, spellings := range map[string][]string{
		"Basic dXNlcjpwPj4/":     {"Basic dXNlcjpwPj4_", "basic dXNlcjpwPj4_"},
		"Basic dXNlcjphP2I+":     {"Basic dXNlcjphP2I-"},
		"Basic dXNlcjpzM2NyPnQ/": {"Basic dXNlcjpzM2NyPnQ_", "Basic dXNlcjpzM2NyPnQ_==="},
	} {
		want := r.StoreKey(std)
		if got := keys(std); len(got) != 1 || got[0] != want {
			t.Fatalf("%q: keys %q, want one, %q", std, got, want)
		}
		for _, v := range spellings {
			if got := keys(v); !slices.Contains(got, want) {
				t.Errorf("%q: keys %q, none of them %q, the key of %q (Node reads them alike)", v, got, want, std)
			}
			if got := keys(v, std); !slices.Contains(got, want) || len(got) > 2 {
				t.Errorf("%q beside %q: keys %q, want %q among at most two", v, std, got, want)
			}
		}
	}
	// Python's reading still counts: a '-' it skips is no fresh count.
	if got, want := keys("Basic dXNl-cjpwYXNzMQ=="), r.StoreKey("Basic dXNlcjpwYXNzMQ=="); !slices.Contains(got, want) {
		t.Errorf("Basic dXNl-cjpwYXNzMQ==: keys %q, none of them %q", got, want)
	}
	// A token is no base64: '-' and '_' are its own.
	if got := keys("Bearer a-b_c"); len(got) != 1 || got[0] != r.StoreKey("Bearer a-b_c") {
		t.Errorf("Bearer a-b_c: keys %q, want one, as written", got)
	}
}
