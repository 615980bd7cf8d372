package server

import (
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
