package config

import (
	"strings"

	"github.com/sluicehq/sluice/internal/rules"
)

// failed holds the keys whose problem was told, for related: a key in it,
// or above or below one, has its problem told already. As a set it answers
// in the length of the key, not of the problems: a config with a problem
// in each of 25,000 rules was weighed 25,000 × 25,000 times.
type failed struct {
	keys  map[string]bool // keys whose problem was told
	above map[string]bool // the keys above those ("a" and "a.b" above "a.b[1]")
}

// failedKeys returns the keys of errs as a failed set.
func failedKeys(errs rules.ParseErrors) *failed {
	f := &failed{keys: make(map[string]bool, len(errs)), above: map[string]bool{}}
	for _, e := range errs {
		f.add(e.Key)
	}
	return f
}

// add records the problem of key.
func (f *failed) add(key string) {
	f.keys[key] = true
	for i := range len(key) {
		if key[i] == '.' || key[i] == '[' {
			f.above[key[:i]] = true
		}
	}
}

// related reports whether key is, contains or is contained in a key whose
// problem was told ("a.b" and "a[1]" lie below "a"), or is checked against
// the value of one (see dependsOnFailed).
func (f *failed) related(key string) bool {
	if f.keys[key] || f.above[key] || f.dependsOnFailed(key) {
		return true
	}
	for i := range len(key) {
		if (key[i] == '.' || key[i] == '[') && f.keys[key[:i]] {
			return true
		}
	}
	return false
}

// dependsOnFailed reports whether key is checked against a key whose value
// did not decode, and whose default would stand in for what was written:
// a rule's burst, segments, max_delay, defer block and fleet options
// against its algorithm and action (action: [delay] is not "reject"), the
// redis block, on_error and the rules' fleet options against store.type
// (type: [redis] is not "memory"). Its problem is told; theirs would be about
// the default.
func (f *failed) dependsOnFailed(key string) bool {
	if f.keys["store.type"] && (key == "store.redis" || strings.HasPrefix(key, "store.redis.") || key == "store.on_error") {
		return true
	}
	rule, field, ok := ruleField(key)
	if !ok {
		return false
	}
	switch field {
	case "name", "key", "match", "rate":
		return false // read alone
	case "sync", "lease", "shards", "action", "defer":
		if f.keys["store.type"] {
			return true
		}
	}
	return field != "algorithm" && field != "action" && (f.keys[rule+".algorithm"] || f.keys[rule+".action"])
}

// ruleField splits "rules[2].burst" (or "rules[2].defer.max_queue") into
// "rules[2]" and "burst" ("defer"); ok is false for a key that is not
// below a rule.
func ruleField(key string) (rule, field string, ok bool) {
	if !strings.HasPrefix(key, "rules[") {
		return "", "", false
	}
	end := strings.Index(key, "].")
	if end < 0 {
		return "", "", false
	}
	rule, field = key[:end+1], key[end+2:]
	if i := strings.IndexAny(field, ".["); i >= 0 {
		field = field[:i]
	}
	return rule, field, true
}
