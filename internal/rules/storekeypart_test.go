package rules

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// FuzzStoreKeyQueryCookie: for a rule keyed by query:NAME or cookie:NAME
// alone, a caller's key counts as a request sending that value as it is
// (KeyFor): escapes decoded, '+' a space, a cookie's quotes stripped. A
// value no request is counted under (a bad escape in a query, a byte no
// cookie holds) is taken as written.
func FuzzStoreKeyQueryCookie(f *testing.F) {
	for _, s := range []string{"abc", "a%20b", "a+b", "%61", "%zz", `"q%2B"`, `"`, "a b", "caf\u00e9", "#x", "%23x"} {
		f.Add(s)
	}
	q := mustCompile(f, Spec{Name: "q", Rate: "1/s", Key: []string{"query:k"}}).Rules[0]
	c := mustCompile(f, Spec{Name: "c", Rate: "1/s", Key: []string{"cookie:k"}}).Rules[0]
	f.Fuzz(func(t *testing.T, s string) {
		if s == "" || strings.ContainsAny(s, "&#;\x00") {
			return // not one query value
		}
		req := &http.Request{Method: "GET", URL: &url.URL{Path: "/", RawQuery: "k=" + s}, Header: http.Header{}}
		if want, ok := q.KeyFor(req, ip1); ok {
			if got := q.StoreKey(s); got != want {
				t.Fatalf("query: StoreKey(%q) = %q, want KeyFor's %q", s, got, want)
			}
		} else if _, err := url.QueryUnescape(s); err != nil && q.StoreKey(s) != q.head([]byte(s)) {
			t.Fatalf("query: StoreKey(%q) = %q, want it as written", s, q.StoreKey(s))
		}
		req.Header.Set("Cookie", "k="+s)
		if want, ok := c.KeyFor(req, ip1); ok {
			if got := c.StoreKey(s); got != want {
				t.Fatalf("cookie: StoreKey(%q) = %q, want KeyFor's %q", s, got, want)
			}
		} else if _, ok := cookieText(s); !ok && c.StoreKey(s) != c.head([]byte(s)) {
			t.Fatalf("cookie: StoreKey(%q) = %q, want it as written", s, c.StoreKey(s))
		}
	})
}
