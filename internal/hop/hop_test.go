package hop

import (
	"net/http"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
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

// Names answers as Named does, with few names (looked through) and with
// many (a set).
func TestNamesAsNamed(t *testing.T) {
	few := []string{"keep-alive, X-Hop", " ,x-other ,"}
	many := append([]string{"a, b, c, d, e, f, g, h, i"}, few...)
	for _, cv := range [][]string{nil, few, many} {
		names := NewNames(cv)
		for _, k := range []string{"Keep-Alive", "X-Hop", "X-Other", "X-Ho", "", "Accept", "A", "I"} {
			if got, want := names.Has(k), Named(cv, k); got != want {
				t.Errorf("NewNames(%q).Has(%q) = %v, want %v (Named)", cv, k, got, want)
			}
		}
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

// Drop takes time in proportion to the header, however many names the
// Connection header lists (a client writes it): each named header goes,
// the others stay. Looking up the whole list for each header costs the
// product, minutes for a header of a megabyte; the wait below is a hang
// detector, far above the milliseconds it takes.
func TestDropManyNames(t *testing.T) {
	const n = 100_000
	h := http.Header{"X-Kept": {"1"}}
	names := make([]string, n)
	for i := range names {
		names[i] = "x-h" + strconv.Itoa(i)
		h[http.CanonicalHeaderKey(names[i])] = []string{"v"}
	}
	h["Connection"] = []string{strings.Join(names, ", ")}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Drop(h)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("Drop of %d headers, all named by Connection, still running after 30s", n)
	}
	if want := (http.Header{"X-Kept": {"1"}}); !reflect.DeepEqual(h, want) {
		t.Errorf("after Drop: %d headers (X-Kept %q), want only X-Kept", len(h), h["X-Kept"])
	}
}

// The names of a Connection header as big as net/http admits (a request
// head of 1 MiB) are held in memory in proportion to the different names
// it lists, not to its fields: "a, a, a, …", one name 349,525 times,
// made a set sized for them all and copied each as its canonical form,
// 13 bytes for each byte of the header (14 MB for one request). The
// bounds are generous: the header's own size for a single name; when
// every name differs (145,000 of them), 24 times it, for each name's copy
// and its place in the set (some 15 bytes a byte; 8 when the set was
// sized at once for every field: linear in the header either way, which
// net/http bounds).
func TestNamesMemoryBounded(t *testing.T) {
	var distinct strings.Builder
	for i := 0; distinct.Len() < 1<<20-16; i++ {
		distinct.WriteString("x" + strconv.Itoa(i) + ",")
	}
	for _, c := range []struct {
		what, cv   string
		times      uint64
		in, absent string
	}{
		{"one name, repeated", strings.Repeat("a, ", 1<<20/3), 1, "A", "X0"},
		{"every name different", distinct.String(), 24, "X12345", "A"},
	} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		n := NewNames([]string{c.cv})
		runtime.ReadMemStats(&after)
		got := after.TotalAlloc - before.TotalAlloc
		t.Logf("%s: %d bytes, %d fields: %d bytes allocated", c.what, len(c.cv), strings.Count(c.cv, ",")+1, got)
		if limit := c.times * uint64(len(c.cv)); got > limit {
			t.Errorf("%s: NewNames of a Connection header of %d bytes allocated %d bytes, want at most %d", c.what, len(c.cv), got, limit)
		}
		if !n.Has(c.in) || n.Has(c.absent) {
			t.Errorf("%s: Has(%q) = %v, Has(%q) = %v; want true, false", c.what, c.in, n.Has(c.in), c.absent, n.Has(c.absent))
		}
	}
}

// TestSameName: names are one header in any case and with '_' for '-',
// as CGI-style servers read them; nothing else makes them one.
func TestSameName(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"Transfer_Encoding", "transfer-encoding", true},
		{"X_API-key", "X-Api-Key", true},
		{"x-api-key", "X_API_KEY", true},
		{"Host", "host", true},
		{"X-Api-Key", "X-Api-Keys", false},
		{"X-Api-Key", "X.Api.Key", false},
		{"X-Api-Key", "X-Api-Kez", false},
		{"", "", true},
	} {
		if got := SameName(tc.a, tc.b); got != tc.want {
			t.Errorf("SameName(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
