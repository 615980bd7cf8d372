package daemon

import (
	"slices"
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
