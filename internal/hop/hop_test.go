package hop

import (
	"net/http"
	"reflect"
	"testing"
)

func TestNamed(t *testing.T) {
	cv := []string{"keep-alive, X-Hop", " ,x-other ,"}
	for k, want := range map[string]bool{
		"Keep-Alive": true, "X-Hop": true, "X-Other": true,
		"X-Ho": false, "": false, "Accept": false,
	} {
		if got := Named(cv, k); got != want {
			t.Errorf("Named(%q, %q) = %v, want %v", cv, k, got, want)
		}
	}
	if Named(nil, "X-Hop") {
		t.Error("Named with no Connection header named a header")
	}
}

func TestDrop(t *testing.T) {
	h := http.Header{
		"Connection":          {"X-Hop, upgrade"},
		"X-Hop":               {"1"},
		"Upgrade":             {"h2c"},
		"Http2-Settings":      {"AAMAAABkAAQAAP__"},
		"Keep-Alive":          {"timeout=5"},
		"Te":                  {"trailers"},
		"Transfer-Encoding":   {"chunked"},
		"Proxy-Authorization": {"Basic eA=="},
		"Authorization":       {"Bearer t"},
		"Content-Length":      {"3"},
		"X-Kept":              {"2"},
	}
	Drop(h)
	want := http.Header{"Authorization": {"Bearer t"}, "Content-Length": {"3"}, "X-Kept": {"2"}}
	if !reflect.DeepEqual(h, want) {
		t.Errorf("after Drop: %v, want %v", h, want)
	}
}
