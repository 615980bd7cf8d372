package config

import "testing"

// TestLineBelowRules: the lines of the keys below a rule are kept in its
// Spec.Lines, and Line and Has find them there as they find the others.
func TestLineBelowRules(t *testing.T) {
	cfg, err := Parse("l.yaml", []byte(`listen: 127.0.0.1:8080
rules:
  - name: a
    rate: 1/s
  - name: b
    match:
      path: /x
    key: [ip, method]
    rate: 2/s
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key  string
		line int
		has  bool
	}{
		{"listen", 1, true},
		{"rules", 2, true},
		{"rules[0]", 3, true},
		{"rules[0].rate", 4, true},
		{"rules[1]", 5, true},
		{"rules[1].match", 6, true},
		{"rules[1].match.path", 7, true},
		{"rules[1].match.methods", 6, false}, // the enclosing key's
		{"rules[1].key[1]", 8, true},
		{"rules[1].key[7]", 8, false},
		{"rules[1].burst", 5, false}, // the rule's
		{"rules[2].rate", 2, false},  // no such rule: the list's
		{"rules[01].rate", 2, false},
		{"store.redis.db", 0, false},
	} {
		if got, has := cfg.Line(tc.key), cfg.Has(tc.key); got != tc.line || has != tc.has {
			t.Errorf("Line(%q), Has = %d, %v; want %d, %v", tc.key, got, has, tc.line, tc.has)
		}
	}
	var built Config
	built.Rules = cfg.Rules
	if got, has := built.Line("rules[1].rate"), built.Has("rules[1].rate"); got != 0 || has {
		t.Errorf("Config built in Go: Line, Has(rules[1].rate) = %d, %v; want 0, false", got, has)
	}
}
