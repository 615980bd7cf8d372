package daemon

import (
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/config"
)

// TestRestartOnlyNamesKeys: a reload refused because it changes the store
// or the defer block names the keys that changed, not the block, so the
// log says what to put back (or restart for).
func TestRestartOnlyNamesKeys(t *testing.T) {
	parse := func(y string) *config.Config {
		t.Helper()
		c, err := config.Parse("sluice.yaml", []byte(y))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	const redis = "store:\n  type: redis\n  redis: {addrs: [127.0.0.1:6379], timeout: 50ms}\n  max_keys: 1000\n"
	old := parse(redis + "rules: [{name: a, rate: 1/s}]\n")
	for _, tc := range []struct {
		name, y string
		want    []string
	}{
		{"max_keys", "store:\n  type: redis\n  redis: {addrs: [127.0.0.1:6379], timeout: 50ms}\n  max_keys: 2000\nrules: [{name: a, rate: 1/s}]\n", []string{"store.max_keys"}},
		{"redis timeout and addrs", "store:\n  type: redis\n  redis: {addrs: [127.0.0.1:6380], timeout: 80ms}\n  max_keys: 1000\nrules: [{name: a, rate: 1/s}]\n", []string{"store.redis.addrs", "store.redis.timeout"}},
		{"rules only", redis + "rules: [{name: a, rate: 2/s}]\n", nil},
		// tls: true has no key of its own below tls: the key is tls.
		{"redis tls turned on", "store:\n  type: redis\n  redis: {addrs: [127.0.0.1:6379], timeout: 50ms, tls: true}\n  max_keys: 1000\nrules: [{name: a, rate: 1/s}]\n", []string{"store.redis.tls"}},
	} {
		got := restartOnly(old, parse(tc.y))
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: restartOnly = %v, want %v", tc.name, got, tc.want)
		}
	}
	// From Redis back to memory: the type first, then the Redis settings
	// it brought (defaults included), never the bare block.
	if got := restartOnly(old, parse("store: {max_keys: 1000}\nrules: [{name: a, rate: 1/s}]\n")); len(got) == 0 || got[0] != "store.type" || slices.Contains(got, "store") {
		t.Errorf("type: restartOnly = %v, want store.type first and the redis keys", got)
	}
}

// TestRestartRefusalNamesLines: a reload refused for changing keys that
// need a restart names, with the file, the line of each key in the new
// file, as every other refusal does; a key left out (a block removed) has
// none to name.
func TestRestartRefusalNamesLines(t *testing.T) {
	td := startDaemon(t, "listen: 127.0.0.1:0\nproxy: {listen: 127.0.0.1:0, upstream: \"http://127.0.0.1:9\"}\nrules:\n  - {name: a, rate: 1/s}\n")
	mustWrite(t, td.path, "listen: 127.0.0.1:1\nstore:\n  max_keys: 1000\nrules:\n  - {name: a, rate: 1/s}\n")
	err := td.d.Reload()
	if err == nil {
		t.Fatal("reload changing listen and store.max_keys and removing proxy: applied, want refused")
	}
	for _, want := range []string{td.path + ": ", "listen (line 1)", "store.max_keys (line 3)", ", proxy, "} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
}
