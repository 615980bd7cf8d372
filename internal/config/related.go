package config

import "github.com/sluicehq/sluice/internal/rules"

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
// problem was told ("a.b" and "a[1]" lie below "a").
func (f *failed) related(key string) bool {
	if f.keys[key] || f.above[key] {
		return true
	}
	for i := range len(key) {
		if (key[i] == '.' || key[i] == '[') && f.keys[key[:i]] {
			return true
		}
	}
	return false
}
