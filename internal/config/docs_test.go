package config

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/doctest"
)

// annotated loads docs/config.md's complete, annotated config (or text,
// an edit of it) from dir, with the files it names made beside it.
func annotated(t *testing.T, dir, text string) (*Config, error) {
	t.Helper()
	return Load(doctest.WriteConfig(t, dir, text))
}

// TestDocEveryKey: docs/config.md's annotated config writes every key the
// decoder accepts, so that a key added to a struct is documented there.
func TestDocEveryKey(t *testing.T) {
	t.Setenv("REDIS_PASSWORD", "docs-password")
	c, err := annotated(t, t.TempDir(), doctest.Block(t, "docs/config.md", "config-annotated"))
	if err != nil {
		t.Fatalf("docs/config.md's annotated config does not load: %v", err)
	}
	written := map[string]bool{}
	for _, k := range c.written() {
		written[index.ReplaceAllString(k, "[]")] = true
	}
	// grpc.xds excludes grpc.config, which the annotated config has: its
	// keys are documented in a sample of their own.
	x, err := annotated(t, t.TempDir(), doctest.Block(t, "docs/config.md", "config-xds"))
	if err != nil {
		t.Fatalf("docs/config.md's grpc.xds sample does not load: %v", err)
	}
	for k := range x.lines {
		if strings.HasPrefix(k, "grpc.xds") {
			written[index.ReplaceAllString(k, "[]")] = true
		}
	}
	if _, err := annotated(t, t.TempDir(), doctest.Block(t, "docs/envoy.md", "envoy-xds")); err != nil {
		t.Errorf("docs/envoy.md's grpc.xds sample does not load: %v", err)
	}
	var missing []string
	for _, k := range keyPaths(reflect.TypeFor[Config](), "") {
		if !written[k] {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("keys missing from docs/config.md's annotated config, or for grpc.xds its config-xds sample (document them there, and copy the annotated block to README.md):\n%s", strings.Join(missing, "\n"))
	}
}

// reDefault finds "default V" at the start of a comment or after "; " or
// ", " (not "the memstore default", "default: the rate").
var reDefault = regexp.MustCompile(`(?:^|[;,] )default ([^\s;,]+)`)

// defaultNotAValue lists the keys whose documented default is not a value
// that the key can be set to, each with why; every entry must still be
// met, so that the list cannot go stale.
var defaultNotAValue = map[string]string{
	"shutdown_timeout":          "0 in the config is the daemon's DefaultShutdownTimeout (10s), applied by internal/daemon",
	"store.type":                "default memory: the annotated config runs on Redis, for its fleet and defer rules",
	"store.redis.username":      "default none: no ACL user",
	"client_ip.trusted_proxies": "default none: an empty list",
	"defer.delivery_timeout":    "default the smaller of 10s and claim_idle/3",
}

// TestDocDefaults: for every key of docs/config.md's annotated config
// whose comment says "default V", a config that writes V means what the
// config without the key means: the documented defaults are the real
// ones.
func TestDocDefaults(t *testing.T) {
	t.Setenv("REDIS_PASSWORD", "docs-password")
	text := doctest.Block(t, "docs/config.md", "config-annotated")
	lines := strings.Split(text, "\n")
	reKey := regexp.MustCompile(`^(\s*(?:- )?)([a-z_0-9]+):(\s*)([^#]*?)(\s*)#\s?(.*)$`)
	reAny := regexp.MustCompile(`^(\s*(?:- )?)([a-z_0-9]+):`)
	var path []string // the keys enclosing the current line, by indentation
	var indents []int
	checked, excepted := 0, map[string]bool{}
	for i, l := range lines {
		m := reKey.FindStringSubmatch(l)
		if m == nil {
			if km := reAny.FindStringSubmatch(l); km != nil {
				path, indents = enter(path, indents, km[1], km[2])
			}
			continue
		}
		path, indents = enter(path, indents, m[1], m[2])
		key := strings.Join(path, ".")
		// The comment goes on over the lines below that are comments only,
		// aligned with it.
		comment, col := m[6], strings.Index(l, "#")
		for _, next := range lines[i+1:] {
			if strings.TrimSpace(next) == "" || !strings.HasPrefix(strings.TrimSpace(next), "#") || strings.Index(next, "#") != col {
				break
			}
			comment += " " + strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(next), "#"))
		}
		dm := reDefault.FindStringSubmatch(comment)
		if dm == nil || m[4] == "" {
			continue
		}
		if why, ok := defaultNotAValue[key]; ok {
			excepted[key] = true
			t.Logf("%s: default not checked as a value: %s", key, why)
			continue
		}
		def := strings.TrimRight(dm[1], ".")
		if strings.HasPrefix(strings.TrimSpace(l), "- ") {
			t.Fatalf("%s: a default on a list item's first key; put that key on a line of its own", key)
		}
		set := append(append(append([]string{}, lines[:i]...), m[1]+strings.Replace(l[len(m[1]):], m[4], def, 1)), lines[i+1:]...)
		omitted := append(append(append([]string{}, lines[:i]...), m[1]+"# (left out)"), lines[i+1:]...)
		dir := t.TempDir() // the same for both: paths in the config resolve alike
		a, err := annotated(t, dir, strings.Join(set, "\n"))
		if err != nil {
			t.Errorf("%s: the documented default %q is not a valid value: %v", key, def, err)
			continue
		}
		b, err := annotated(t, dir, strings.Join(omitted, "\n"))
		if err != nil {
			t.Errorf("%s: the config without the key does not load: %v", key, err)
			continue
		}
		if diff := differences(meaning(t, a), meaning(t, b)); diff != "" {
			t.Errorf("%s: docs/config.md says the default is %s, but writing it differs from leaving the key out:\n%s", key, def, diff)
		}
		checked++
	}
	for key := range defaultNotAValue {
		if !excepted[key] {
			t.Errorf("defaultNotAValue lists %s, which no longer documents such a default: remove it", key)
		}
	}
	if checked < 30 {
		t.Errorf("checked %d documented defaults; the comments are misread", checked)
	}
}

// enter returns the path to key, written after lead ("  ", "  - "),
// given the path and indentations of the enclosing keys. A list item's
// keys are indented past its "- ".
func enter(path []string, indents []int, lead string, key string) ([]string, []int) {
	indent := len(lead)
	for len(indents) > 0 && indents[len(indents)-1] >= indent {
		path, indents = path[:len(path)-1], indents[:len(indents)-1]
	}
	return append(path, key), append(indents, indent)
}

// differences lists the fields of a and b (meanings) that differ.
func differences(a, b [2]any) string {
	var out strings.Builder
	for i := range a {
		va, vb := reflect.ValueOf(a[i]), reflect.ValueOf(b[i])
		switch va.Kind() {
		case reflect.Struct:
			for f := 0; f < va.NumField(); f++ {
				if !va.Type().Field(f).IsExported() {
					continue
				}
				if !reflect.DeepEqual(va.Field(f).Interface(), vb.Field(f).Interface()) {
					fmt.Fprintf(&out, "%s: written %+v, left out %+v\n", va.Type().Field(f).Name, reflect.Indirect(va.Field(f)), reflect.Indirect(vb.Field(f)))
				}
			}
		default:
			if !reflect.DeepEqual(a[i], b[i]) {
				fmt.Fprintf(&out, "rules: written %+v\nleft out %+v\n", a[i], b[i])
			}
		}
	}
	if out.Len() == 0 && !reflect.DeepEqual(a, b) {
		fmt.Fprintf(&out, "written %+v\nleft out %+v\n", a, b)
	}
	return out.String()
}

// meaning is what c says, without where it said it: the config with its
// rules compiled (defaults filled in).
func meaning(t *testing.T, c *Config) [2]any {
	t.Helper()
	rs, err := c.RuleSet()
	if err != nil {
		t.Fatal(err)
	}
	cc := *c
	cc.File, cc.lines, cc.digest, cc.Rules, cc.set = "", nil, [32]byte{}, nil, nil
	var compiled []any
	for _, r := range rs.Rules {
		rr := *r
		// The queue's bounds are defaulted where they are used.
		if rr.Defer.MaxQueue <= 0 {
			rr.Defer.MaxQueue = deferq.DefaultMaxQueue
		}
		rr.Defer.MaxBodyBytes = deferq.Rule{MaxBodyBytes: rr.Defer.MaxBodyBytes}.MaxBody()
		compiled = append(compiled, rr)
	}
	return [2]any{cc, compiled}
}

// reKeyRef finds a config key path written in the docs' prose, such as
// `store.redis.timeout` or `client_ip.trusted_proxies`, alone or with its
// value (`store.on_error: deny`).
var reKeyRef = regexp.MustCompile("`((?:listen|log_level|shutdown_timeout|api|proxy|grpc|store|client_ip|forward_auth|limits|defer|rules)(?:\\[\\d*\\])?(?:\\.[a-z0-9_]+(?:\\[\\d*\\])?)+)(?:: [^`]*)?`")

var anyIndex = regexp.MustCompile(`\[\d*\]`)

// TestDocKeyNames: every key path README.md, docs/*.md and the examples'
// READMEs write in backquotes (`store.redis.timeout`, `store.on_error:
// deny`) is a key of the config.
func TestDocKeyNames(t *testing.T) {
	keys := map[string]bool{}
	for _, k := range keyPaths(reflect.TypeFor[Config](), "") {
		keys[strings.ReplaceAll(k, "[]", "")] = true
	}
	pages, err := filepath.Glob(filepath.Join(doctest.Root(), "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, filepath.Join(doctest.Root(), "README.md"))
	for _, pattern := range []string{"examples/*/README.md", "examples/*/*/README.md"} {
		m, err := filepath.Glob(filepath.Join(doctest.Root(), pattern))
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, m...)
	}
	var bad []string
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(doctest.Root(), p)
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range reKeyRef.FindAllStringSubmatch(line, -1) {
				if !keys[anyIndex.ReplaceAllString(m[1], "")] {
					bad = append(bad, fmt.Sprintf("%s:%d: %s", rel, i+1, m[1]))
				}
			}
		}
	}
	if len(bad) > 0 {
		t.Errorf("key paths in the docs that are no config keys:\n%s", strings.Join(bad, "\n"))
	}
}
