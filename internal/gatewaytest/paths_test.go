package gatewaytest

import (
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"
	"testing"
)

// appPath is the path an app behind the gateway routes a request target
// on, as Node's, Puma's or nginx's own parsers read it: a fragment cut
// off, the query too, percent-encoding decoded, dot segments resolved.
func appPath(target string) string {
	target, _, _ = strings.Cut(target, "#")
	target, _, _ = strings.Cut(target, "?")
	if p, err := url.PathUnescape(target); err == nil {
		target = p
	}
	return path.Clean(target)
}

// Once a client's login is spent, no spelling of POST /login that the app
// reads as /login gets through the gateway: the path Sluice matches is the
// one the gateway routes on and the app receives, or a spelling no app
// reads as /login, or one the gateway itself refuses with 400. The
// targets are sent as they are on the wire (Go's client would drop a
// fragment).
func TestGatewayPathSpellings(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			a := startApp(t)
			s := startSluice(t, sluiceYAML(t, k.sluice, ""))
			g := k.start(t, s.addr, a.addr(), variant{})
			addr := strings.TrimPrefix(g.url, "http://")
			post := func(src, target string) result {
				return sendRaw(t, src, addr, "POST "+target+" HTTP/1.1\r\nHost: "+addr+"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			}
			long := "/login?q=" + strings.Repeat("a", 6000) // under nginx's 8k request line
			for i, target := range []string{"/login#x", "/login#", "/login/#/../x", "/%6Cogin#x", "/login?next=/#x", "/x/../login#y", long, long + "#x",
				// Encoded slashes and dots, backslashes, ;params, repeated
				// and trailing slashes, NUL, overlong UTF-8 (no app reads
				// %c0%af as '/'), a path that is all slashes after /login.
				"/login%2F", "/x/%2e%2e/login", "/x/..%2Flogin", "/login\\", "/\\login", "\\login", "//login", "/login;x", "/login/",
				"/./login", "/login/..;/login", "/%2e/login", "/login%00", "/login%c0%af", "/login" + strings.Repeat("/", 6000),
				// The absolute form (the gateway takes the path from it, and
				// the host: the app is asked for this one), and "*".
				"http://HOST/login", "HTTP://HOST//login", "http://other.example/login", "*",
			} {
				target = strings.ReplaceAll(target, "HOST", addr)
				src := fmt.Sprintf("127.0.3.%d", i+1)
				what := target
				if len(what) > 40 {
					what = what[:40] + "…"
				}
				if r := post(src, "/login"); r.status != http.StatusOK {
					t.Fatalf("%s: first login: got %v, want 200", src, r)
				}
				before := a.hits.Load()
				r := post(src, target)
				if a.hits.Load() == before {
					if r.status == http.StatusBadRequest && !strings.Contains(r.body, "rate_limited") {
						continue // the gateway's own 400: no such request (nginx: NUL, "*", no leading '/')
					}
					wantLimited(t, "POST "+what+" after the login was spent", r, "login")
					continue
				}
				if got := *a.target.Load(); appPath(got) == "/login" {
					t.Errorf("POST %s after the login was spent: the app got %.60q, which it reads as /login (%v)", what, got, r)
				}
			}
		})
	}
}
