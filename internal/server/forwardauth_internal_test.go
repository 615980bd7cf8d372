package server

import (
	"net/http"
	"net/url"
	"reflect"
	"testing"
)

// FuzzParseURI: parseURI makes of an original URI what
// url.ParseRequestURI makes of it, the same URL or an error.
func FuzzParseURI(f *testing.F) {
	for _, s := range []string{"/", "/items?page=1", "/a?", "/a??b=c#d", "//x/y", "/a:b;c=d@e", "/a%20b", "/a b", "/a?b c",
		"/a?b\tc", "/a?b\x7fc", "/a?\xff", "*", "", "items", "http://h/x", "/a#f", "/é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, uri string) {
		var got url.URL
		err := parseURI(uri, &got)
		want, wantErr := url.ParseRequestURI(uri)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("parseURI(%q): error %v; url.ParseRequestURI: %v", uri, err, wantErr)
		}
		if err != nil {
			if err.Error() != wantErr.Error() {
				t.Fatalf("parseURI(%q): error %v; url.ParseRequestURI: %v", uri, err, wantErr)
			}
			return
		}
		// DeepEqual: url.URL holds its user info by pointer, and the two
		// parses make two of them.
		if !reflect.DeepEqual(got, *want) {
			t.Fatalf("parseURI(%q) = %#v; url.ParseRequestURI: %#v", uri, got, *want)
		}
	})
}

// A fragment in the original URI (nginx's $request_uri keeps one a client
// sent) is not part of the path: nginx routes without it, and so do most
// apps behind it. The query is kept whole, '#' and all: Go's server reads
// a query on past a '#', wherever the '#' is, and the rules' query key
// part reads it both ways.
func TestOriginalRequestFragment(t *testing.T) {
	for _, tc := range []struct{ uri, path, query string }{
		{"/login#x", "/login", ""},
		{"/login?key=k#1", "/login", "key=k#1"},
		{"/a/#/../b?c", "/a/", "c"},
		{"/items?x=1#&key=k", "/items", "x=1#&key=k"},
		{"/login%23x", "/login#x", ""}, // an escaped '#' is part of the path
	} {
		r, err := http.NewRequest("GET", "http://sluice/v1/forward-auth", nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("X-Forwarded-Uri", tc.uri)
		orig, err := originalRequest(r, new(origRequest))
		if err != nil {
			t.Fatalf("originalRequest(%q): %v", tc.uri, err)
		}
		if orig.URL.Path != tc.path || orig.URL.RawQuery != tc.query {
			t.Errorf("originalRequest(%q): path %q, query %q; want %q, %q", tc.uri, orig.URL.Path, orig.URL.RawQuery, tc.path, tc.query)
		}
	}
}
