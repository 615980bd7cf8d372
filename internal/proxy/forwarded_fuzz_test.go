package proxy

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// FuzzForwardedValues: a trusted proxy's X-Forwarded-Proto passes as
// "http" or "https" alone, only when it is one of them in any case; an
// X-Forwarded-Host passes only when net/http would read it, as the one
// Host of a request, as exactly that host; an X-Forwarded-Port only when
// it is a port number written as strconv writes it.
func FuzzForwardedValues(f *testing.F) {
	for _, s := range []string{"https", "HTTP", "hTTps", "https, http", "ftp", "", " https", "app.example:8443",
		"[2001:db8::1]:80", "a.example,b.example", "a b", "a/b", "a\r\nX: y", "443", "0443", "65535", "65536", "+80", "0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		switch p := forwardedProto(v); {
		case p == "":
			if strings.EqualFold(v, "http") || strings.EqualFold(v, "https") {
				t.Errorf("forwardedProto(%q) refused it", v)
			}
		case p != "http" && p != "https" || !strings.EqualFold(v, p):
			t.Errorf("forwardedProto(%q) = %q", v, p)
		}
		if validForwardedHost(v) {
			r, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET / HTTP/1.1\r\nHost: " + v + "\r\n\r\n")))
			switch {
			case err != nil:
				t.Errorf("validForwardedHost(%q), but net/http refuses it as a request's Host: %v", v, err)
			case r.Host != v || strings.ContainsAny(v, ", \t"):
				t.Errorf("validForwardedHost(%q), but net/http reads it as the Host %q", v, r.Host)
			}
		}
		n, err := strconv.Atoi(v)
		if want := err == nil && 1 <= n && n <= 65535 && strconv.Itoa(n) == v; validForwardedPort(v) != want {
			t.Errorf("validForwardedPort(%q) = %v, want %v", v, !want, want)
		}
	})
}
