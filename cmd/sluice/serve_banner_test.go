package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestServeBannerEndpoints: the line naming the decision API's endpoints
// names GET /v1/hotkeys, served on every store, and GET /v1/deferred/ID
// where it is served, on a Redis store only. It once named neither, and a
// reader of the hot-key or deferral docs looked for them there in vain.
func TestServeBannerEndpoints(t *testing.T) {
	srv := redistest.StartServer(t)
	for _, c := range []struct {
		name, yaml string
		deferred   bool
	}{
		{"memory", "rules:\n  - name: r\n    rate: 5/m\n", false},
		{"redis", fmt.Sprintf("store:\n  type: redis\n  redis: {addrs: [%s]}\nrules:\n  - name: r\n    rate: 5/m\n", srv.Addr), true},
	} {
		path := writeConfig(t, c.yaml)
		got := serveBanner(t, func(l string) bool { return strings.HasPrefix(l, "sluice: rule ") }, nil,
			"-config", path, "-listen", "127.0.0.1:0")
		var line string
		for _, l := range strings.Split(got, "\n") {
			if strings.HasPrefix(l, "sluice: decision API on ") {
				line = l
			}
		}
		if !strings.Contains(line, "GET /v1/hotkeys") {
			t.Errorf("%s: %q does not name GET /v1/hotkeys", c.name, line)
		}
		if strings.Contains(line, "GET /v1/deferred/ID") != c.deferred {
			t.Errorf("%s: %q names GET /v1/deferred/ID: %v, want %v (served on a Redis store only)", c.name, line, !c.deferred, c.deferred)
		}
	}
}
