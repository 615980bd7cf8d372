package config

import (
	"errors"
	"strings"
	"testing"
)

// TestWrongTypeToldOnce: a value of the wrong type is told once; what
// depends on it is not checked against the default it left in its place
// ("max_delay: applies to action: delay only (action is reject)" after
// action: [delay]). A problem of its own in a key that does not depend
// on it is still told.
func TestWrongTypeToldOnce(t *testing.T) {
	const redis = "store: {type: redis, redis: {addrs: [\"127.0.0.1:6379\"]}}\n"
	for _, tc := range []struct {
		name, yaml string
		want       []string // each problem, in order
	}{
		{"algorithm", "rules:\n  - name: r\n    rate: 5/m\n    algorithm: [gcra]\n    burst: 3\n",
			[]string{"rules[0].algorithm: want a string, not a list"}},
		{"action", "rules:\n  - name: r\n    rate: 5/m\n    action: [delay]\n    max_delay: 2s\n",
			[]string{"rules[0].action: want a string, not a list"}},
		{"action, defer block", redis + "proxy: {listen: \"127.0.0.1:0\", upstream: \"http://127.0.0.1:9\"}\nrules:\n  - name: r\n    rate: 5/m\n    action: [defer]\n    defer: {max_queue: 10}\n",
			[]string{"rules[0].action: want a string, not a list"}},
		{"algorithm, and a key part of its own", "rules:\n  - name: r\n    rate: 5/m\n    algorithm: [gcra]\n    burst: 3\n    key: [bogus]\n",
			[]string{"rules[0].algorithm: want a string, not a list", `rules[0].key[0]: unknown key part "bogus"`}},
		{"store type", "store: {type: [redis], redis: {addrs: [\"127.0.0.1:6379\"]}}\nrules:\n  - name: r\n    rate: 5/m\n    algorithm: gcra\n    sync: 10ms\n",
			[]string{"store.type: want a string, not a list"}},
		{"store type, and a store key of its own", "store: {type: [redis], max_keys: -1}\n",
			[]string{"store.type: want a string, not a list", "store.max_keys: -1 must not be negative"}},
		{"store type, and a rule of its own", "store: {type: [redis]}\nrules:\n  - name: r\n    rate: 5/fortnight\n",
			[]string{"store.type: want a string, not a list", `rules[0].rate: "5/fortnight"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("c.yaml", []byte("listen: 127.0.0.1:0\n"+tc.yaml))
			var ces Errors
			if !errors.As(err, &ces) {
				t.Fatalf("Parse = %v, want problems", err)
			}
			if len(ces) != len(tc.want) {
				t.Fatalf("%d problems, want %d:\n%v", len(ces), len(tc.want), err)
			}
			for i, w := range tc.want {
				if !strings.Contains(ces[i].Error(), w) {
					t.Errorf("problem %d = %q, want it to contain %q", i, ces[i], w)
				}
			}
		})
	}
}
