package config

import (
	"strings"
	"testing"
)

// TestFleetOptionsNeedRedis: sync, lease and shards on the memory store
// are refused, naming the key and the option as the docs call it (a soft
// limit, a hard limit), so that a reader finds it in "Running a fleet".
func TestFleetOptionsNeedRedis(t *testing.T) {
	for _, c := range []struct{ opt, want string }{
		{"algorithm: gcra\n    sync: 10ms", "doc.yaml:5: rules[0].sync: sync (a soft limit) needs store.type: redis"},
		{"algorithm: gcra\n    lease: 5", "doc.yaml:5: rules[0].lease: lease (a hard limit) needs store.type: redis"},
		{"shards: 3", "doc.yaml:4: rules[0].shards: shards (splitting a key over Redis keys) needs store.type: redis"},
	} {
		_, err := Parse("doc.yaml", []byte("rules:\n  - name: r\n    rate: 10/s\n    "+c.opt+"\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s on the memory store: %v, want %q", c.opt, err, c.want)
		}
	}
}
