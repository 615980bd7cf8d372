package main

import (
	"bufio"
	"context"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/doctest"
)

// reBound finds an address serve printed, after the words before it.
var reBound = regexp.MustCompile(`((?:decision API on|proxy on|try it: curl -s -X POST) http://)(127\.0\.0\.1:\d+)`)

// serveBanner runs serve with args and returns what it prints on standard
// output up to and including the first line for which last holds, with
// the addresses it bound (on port 0) replaced by the documented ones.
func serveBanner(t *testing.T, last func(string) bool, addrs map[string]string, args ...string) string {
	t.Helper()
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- serve(ctx, args, pw, io.Discard)
		pw.Close()
	}()
	defer func() {
		cancel()
		go io.Copy(io.Discard, pr)
		<-done
	}()
	var b strings.Builder
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		b.WriteString(sc.Text() + "\n")
		if last(sc.Text()) {
			break
		}
	}
	out := b.String()
	for _, m := range reBound.FindAllStringSubmatch(out, -1) {
		if to, ok := addrs[m[1]]; ok {
			out = strings.ReplaceAll(out, m[0], m[1]+to)
		}
	}
	return out
}

// TestDocServeSamples: what docs/daemon.md shows `sluice serve` printing is
// what it prints.
func TestDocServeSamples(t *testing.T) {
	holdPort8080(t)
	got := serveBanner(t, func(l string) bool { return strings.HasPrefix(l, "sluice: try it") },
		map[string]string{"decision API on http://": "127.0.0.1:8080", "try it: curl -s -X POST http://": "127.0.0.1:8080"},
		"-listen", "127.0.0.1:0")
	doctest.Check(t, "docs/daemon.md", "builtin-serve", "$ sluice serve\n"+got)

	path := writeConfig(t, doctest.Block(t, "docs/daemon.md", "daemon-config"))
	got = serveBanner(t, func(l string) bool { return strings.HasPrefix(l, "sluice: rule ") },
		map[string]string{"decision API on http://": "127.0.0.1:8080", "proxy on http://": "127.0.0.1:8000"},
		"-config", path, "-listen", "127.0.0.1:0", "-proxy-listen", "127.0.0.1:0")
	doctest.Check(t, "docs/daemon.md", "daemon-serve", "$ sluice serve -config sluice.yaml\n"+got)
}
