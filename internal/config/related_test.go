package config

import (
	"testing"

	"github.com/sluicehq/sluice/internal/rules"
)

// TestRelated: a key is related to a key whose problem was told when it
// is that key, lies below it, or lies above it.
func TestRelated(t *testing.T) {
	f := failedKeys(rules.ParseErrors{{Key: "rules[2].burst"}, {Key: "store.redis"}, {Key: ""}})
	f.add("api.max_connections")
	for _, tc := range []struct {
		key  string
		want bool
	}{
		{"rules[2].burst", true},
		{"rules[2]", true}, // above
		{"rules", true},
		{"store.redis.timeout", true}, // below
		{"store.redis.tls.ca", true},
		{"store", true},
		{"", true},
		{"api.max_connections", true},
		{"api", true},
		{"rules[2].burst2", false}, // not below: no separator
		{"rules[20].burst", false},
		{"rules[2].rate", false},
		{"store.redis2", false},
		{"store.on_error", false},
		{"api.idle_timeout", false},
		{"listen", false},
	} {
		if got := f.related(tc.key); got != tc.want {
			t.Errorf("related(%q) = %v, want %v", tc.key, got, tc.want)
		}
	}
}
