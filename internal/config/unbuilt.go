package config

import (
	"github.com/sluicehq/sluice/internal/rules"
)

// unbuilt lists the keys this version parses and checks but does not act
// on yet. Unsupported refuses them by name, so that a user is never told
// a limit holds when it does not. When you build a feature, delete its
// entry here (and its line in testdata/config/ok-full.check-config.golden).
// Every key this version parses is built: the list is empty.
var unbuilt = []unbuiltFeature{}

// unbuiltFeature is a feature parsed but not acted on: what it is, for
// the error, and the key paths of c that use it (keysIf).
type unbuiltFeature struct {
	what string
	used func(c *Config) []string
}

// Unsupported refuses the features of c that are parsed but not enforced
// by this version (the unbuilt list), naming file, line and key, rather
// than silently ignoring them. serve refuses to start with them and
// check-config reports them. The error, if any, is Errors.
func Unsupported(c *Config) error {
	var es Errors
	for _, f := range unbuilt {
		for _, key := range f.used(c) {
			es = append(es, &rules.ParseError{File: c.File, Line: c.Line(key), Key: key,
				Msg: f.what + " is not supported yet by this version of sluice serve; remove it"})
		}
	}
	return es.Err()
}

func keysIf(used bool, key string) []string {
	if used {
		return []string{key}
	}
	return nil
}
