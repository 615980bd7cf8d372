package config

import (
	"strings"
	"testing"
)

// TestUnsupportedNamesKey: a feature on the unbuilt list is refused by
// Unsupported naming the file, the line and the key that uses it; none
// is left on the list, so a config using every key passes.
func TestUnsupportedNamesKey(t *testing.T) {
	const y = "listen: 127.0.0.1:0\nstore:\n  type: redis\n  redis: {addrs: [127.0.0.1:6379], db: 3}\n"
	c, err := Parse("sluice.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if err := Unsupported(c); err != nil {
		t.Errorf("Unsupported with store.redis.db 3 = %v; want nil: databases are built", err)
	}
	saved := unbuilt
	t.Cleanup(func() { unbuilt = saved })
	unbuilt = append(unbuilt, unbuiltFeature{"a test feature", func(c *Config) []string {
		return keysIf(c.Store.Redis.DB != 0, "store.redis.db")
	}})
	err = Unsupported(c)
	if err == nil || !strings.Contains(err.Error(), "sluice.yaml:4: store.redis.db: a test feature is not supported yet") {
		t.Errorf("Unsupported with an unbuilt feature = %v; want it named with file, line and key", err)
	}
}
