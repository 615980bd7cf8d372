package daemon

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/doctest"
)

// docInstant is when the documented requests are asked: 10 s into a
// minute, so the figures of the minute-long windows are those a reader
// sees at that moment.
var docInstant = time.Unix(1767225610, 0) // 2026-01-01T00:00:10Z

// docDaemon runs the daemon on yaml (its listen addresses moved to free
// ports, its upstream to a bare local server) with the clock stopped at
// docInstant, and returns the URLs of the decision API and the proxy.
func docDaemon(t *testing.T, yaml string) (api, proxy string) {
	t.Helper()
	return docDaemonClock(t, yaml, func() time.Time { return docInstant })
}

// docDaemonClock is docDaemon with the clock now.
func docDaemonClock(t *testing.T, yaml string, now func() time.Time) (api, proxy string) {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") }))
	t.Cleanup(up.Close)
	yaml = regexp.MustCompile(`(listen: )127\.0\.0\.1:\d+`).ReplaceAllString(yaml, "${1}127.0.0.1:0")
	yaml = regexp.MustCompile(`(upstream: )http://\S+`).ReplaceAllString(yaml, "${1}"+up.URL)
	cfg, err := config.Parse("doc.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("the documented config does not parse: %v\n%s", err, yaml)
	}
	d, err := New(cfg, Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	a := d.Addrs()
	api = "http://" + a.API
	if a.Proxy != "" {
		proxy = "http://" + a.Proxy
	}
	return api, proxy
}

// curlI is what `curl -si URL` prints, with the headers other than the
// rate-limit ones left out (Go writes header names in canonical form, in
// sorted order).
func curlI(t *testing.T, url string) (status int, out string) {
	t.Helper()
	return curl(t, "GET", url)
}

// curlPost is curlI for `curl -si -X POST URL`.
func curlPost(t *testing.T, url string) (status int, out string) {
	t.Helper()
	return curl(t, "POST", url)
}

func curl(t *testing.T, method, url string) (status int, out string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var b strings.Builder
	b.WriteString("HTTP/1.1 " + resp.Status + "\n")
	var names []string
	for k := range resp.Header {
		if strings.HasPrefix(k, "Ratelimit") || strings.HasPrefix(k, "X-Ratelimit") || k == "Retry-After" {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	for _, k := range names {
		b.WriteString(k + ": " + resp.Header.Get(k) + "\n")
	}
	if resp.StatusCode != http.StatusOK {
		b.WriteString("\n" + string(body))
	}
	return resp.StatusCode, b.String()
}

// TestDocSamples runs the commands of the quick starts in README.md and
// docs/daemon.md against the daemon, and checks the answers shown there
// are the program's.
func TestDocSamples(t *testing.T) {
	t.Run("README quick start", func(t *testing.T) {
		sh := doctest.Block(t, "README.md", "quickstart")
		_, yaml, ok := strings.Cut(sh, "<<'YAML'\n")
		yaml, _, ok2 := strings.Cut(yaml, "\nYAML\n")
		if !ok || !ok2 {
			t.Fatalf("README.md quick start: no config between <<'YAML' and YAML in\n%s", sh)
		}
		checkWaitsForServe(t, "README.md quick start", sh)
		_, proxy := docDaemon(t, yaml)
		var codes []string
		for range 4 {
			code, _ := curlI(t, proxy+"/")
			codes = append(codes, strconv.Itoa(code))
		}
		if want := "# " + strings.Join(codes, " "); !strings.Contains(sh, want) {
			t.Errorf("README.md quick start: the loop's comment does not say %q:\n%s", want, sh)
		}
		_, out := curlI(t, proxy+"/")
		doctest.Check(t, "README.md", "quickstart-429", out)
	})
	t.Run("docs/daemon.md quick start", func(t *testing.T) {
		_, proxy := docDaemon(t, doctest.Block(t, "docs/daemon.md", "daemon-config"))
		_, first := curlI(t, proxy+"/")
		doctest.Check(t, "docs/daemon.md", "daemon-first", first)
		curlI(t, proxy+"/")
		curlI(t, proxy+"/")
		_, fourth := curlI(t, proxy+"/")
		doctest.Check(t, "docs/daemon.md", "daemon-429", fourth)
	})
	t.Run("docs/http.md limited answer", func(t *testing.T) {
		var now atomic.Int64
		now.Store(docInstant.UnixNano())
		_, proxy := docDaemonClock(t, `listen: 127.0.0.1:0
proxy:
  listen: 127.0.0.1:0
  upstream: http://127.0.0.1:1
rules:
  - name: login-per-ip
    match: {methods: [POST], path: /login}
    key: [ip]
    rate: 5/m
    algorithm: token_bucket
`, func() time.Time { return time.Unix(0, now.Load()) })
		for i := range 5 {
			if code, out := curlPost(t, proxy+"/login"); code == http.StatusTooManyRequests {
				t.Fatalf("POST /login #%d limited: %s", i+1, out)
			}
		}
		now.Store(docInstant.Add(10500 * time.Millisecond).UnixNano())
		_, out := curlPost(t, proxy+"/login")
		doctest.Check(t, "docs/http.md", "http-429", out)
	})
	t.Run("docs/http.md report", func(t *testing.T) {
		api, _ := docDaemon(t, `listen: 127.0.0.1:0
rules:
  - name: llm-tokens
    key: [header:X-Team]
    rate: 600/m
    algorithm: token_bucket
`)
		var out strings.Builder
		for _, step := range []struct{ path, body string }{
			{"/v1/check", `{"rule":"llm-tokens","key":"team-a","cost":0}`},
			{"/v1/report", `{"rule":"llm-tokens","key":"team-a","cost":1500}`},
			{"/v1/check", `{"rule":"llm-tokens","key":"team-a","cost":0}`},
		} {
			r := do(t, "POST", api+step.path, step.body)
			out.WriteString("$ curl -s localhost:8080" + step.path + " -d '" + step.body + "'\n" + r.body)
		}
		doctest.Check(t, "docs/http.md", "report", out.String())
	})
	t.Run("docs/http.md check and rules", func(t *testing.T) {
		// 48 s into the minute, as the page says.
		api, _ := docDaemonClock(t, `listen: 127.0.0.1:0
rules:
  - name: login-per-ip
    match: {methods: [POST], path: /login}
    key: [ip]
    rate: 5/m
`, func() time.Time { return docInstant.Add(38 * time.Second) })
		var out strings.Builder
		for _, body := range []string{
			`{"rule":"login-per-ip","key":"203.0.113.7"}`,
			`{"rule":"login-per-ip","key":"203.0.113.7","cost":5}`,
		} {
			r := do(t, "POST", api+"/v1/check", body)
			out.WriteString("$ curl -s localhost:8080/v1/check -d '" + body + "'\n" + r.body)
		}
		doctest.Check(t, "docs/http.md", "check", out.String())
		r := get(t, api+"/v1/rules")
		doctest.Check(t, "docs/http.md", "rules", "$ curl -s localhost:8080/v1/rules\n"+r.body)
	})
	t.Run("docs/daemon.md built-in example", func(t *testing.T) {
		api, _ := docDaemon(t, string(config.Example()))
		const body = `{"rule":"demo-per-ip","key":"203.0.113.7"}`
		r := do(t, "POST", api+"/v1/check", body)
		doctest.Check(t, "docs/daemon.md", "builtin-check",
			"$ curl -s -X POST localhost:8080/v1/check -d '"+body+"'\n"+r.body)
	})
}

// checkWaitsForServe: a shell sample that starts `sluice serve` in the
// background asks it nothing before it is ready: the first curl after it
// is a loop that polls /readyz. A reader who pastes the sample otherwise
// gets 000 (connection refused) for every request, the daemon not yet
// listening (a first build takes about a minute).
func checkWaitsForServe(t *testing.T, name, sh string) {
	t.Helper()
	started := false
	for _, l := range strings.Split(sh, "\n") {
		code, _, _ := strings.Cut(l, "#")
		code = strings.TrimSpace(code)
		switch {
		case strings.Contains(code, " serve") && strings.HasSuffix(code, "&"):
			started = true
		case started && strings.Contains(code, "curl"):
			if !strings.HasPrefix(code, "until ") || !strings.Contains(code, "/readyz") {
				t.Errorf("%s: the first request after serve starts in the background does not wait for it (want `until curl -sf …/readyz …; do sleep …; done` first): %q", name, l)
			}
			return
		}
	}
	if !started {
		t.Errorf("%s: no `… serve … &` line in\n%s", name, sh)
	}
}
