package config

import (
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/yamlnode"
)

// keyPaths returns the key paths the decoder accepts below a value of type
// t, "rules[].match.path" style, read from the yaml tags as the decoder
// reads them.
func keyPaths(t reflect.Type, prefix string) []string {
	if reflect.PointerTo(t).Implements(unmarshalType) || t == durationType || t == prefixType {
		return nil
	}
	switch t.Kind() {
	case reflect.Pointer:
		return keyPaths(t.Elem(), prefix)
	case reflect.Slice:
		return keyPaths(t.Elem(), prefix+"[]")
	case reflect.Struct:
		var out []string
		for _, f := range infoOf(t).fields {
			key := yamlnode.Join(prefix, f.name)
			out = append(out, key)
			out = append(out, keyPaths(t.FieldByIndex(f.index).Type, key)...)
		}
		return out
	}
	return nil
}

var index = regexp.MustCompile(`\[\d+\]`)

// TestEveryKeyHasAFixture: every key the decoder accepts is written in one
// of the testdata/config/ok-*.yaml fixtures, so that a key added to a
// struct is decoded, defaulted and checked by a test that reads it from a
// file, and check-config's answer to it is in a golden file.
func TestEveryKeyHasAFixture(t *testing.T) {
	configEnv(t)
	files, err := filepath.Glob("testdata/config/ok-*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("fixtures: %v %v", files, err)
	}
	written := map[string]bool{}
	for _, file := range files {
		c, err := Load(file)
		if err != nil {
			t.Fatalf("Load(%s): %v", file, err)
		}
		for _, k := range c.written() {
			written[index.ReplaceAllString(k, "[]")] = true
		}
	}
	var missing []string
	for _, k := range keyPaths(reflect.TypeFor[Config](), "") {
		if !written[k] {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("keys written in no testdata/config/ok-*.yaml fixture (add them to ok-full.yaml, or an ok-*.yaml of their own when they conflict with it):\n%s",
			strings.Join(missing, "\n"))
	}
}
