package descriptors

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReplacesRing: limits that replace each other in a ring (a replaces
// b, b replaces a; or through more) are refused, naming the ring: when a
// request matches them all, each is dropped for another, and none of them
// applies (the reference service drops them all without a word). A chain
// is not a ring, nor are two limits replacing the same one.
func TestReplacesRing(t *testing.T) {
	rl := func(name string, replaces ...string) string {
		s := "{unit: second, requests_per_unit: 1, name: " + name
		if len(replaces) > 0 {
			s += ", replaces: ["
			for i, r := range replaces {
				if i > 0 {
					s += ", "
				}
				s += "{name: " + r + "}"
			}
			s += "]"
		}
		return s + "}"
	}
	file := func(rls ...string) string {
		s := "domain: d\ndescriptors:\n"
		for i, r := range rls {
			s += "  - key: k" + string(rune('a'+i)) + "\n    rate_limit: " + r + "\n"
		}
		return s
	}
	for _, tc := range []struct {
		name, src, want string
	}{
		{"two", file(rl("a", "b"), rl("b", "a")), `test.yaml:3: descriptors[0].rate_limit.replaces: the limits "a" → "b" → "a" replace each other in a ring`},
		{"three, nested", "domain: d\ndescriptors:\n  - key: x\n    rate_limit: " + rl("x") + "\n    descriptors:\n      - key: y\n        rate_limit: " + rl("c", "x") +
			"\n  - key: z\n    rate_limit: " + rl("z", "y") + "\n  - key: w\n    rate_limit: " + rl("y", "c") + "\n  - key: v\n    rate_limit: " + rl("x", "z") + "\n",
			`test.yaml:6: descriptors[0].descriptors[0].rate_limit.replaces: the limits "c" → "x" → "z" → "y" → "c" replace each other in a ring`},
		{"chain", file(rl("a", "b"), rl("b", "c"), rl("c"), rl("d", "c")), ""},
		{"a name on two limits", file(rl("a", "b"), rl("a"), rl("b")), ""},
	} {
		_, err := Parse("test.yaml", []byte(tc.src))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want it read", tc.name, err)
		case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
			t.Errorf("%s: %v, want %s…", tc.name, err, tc.want)
		}
	}
	// Across the files of a merged domain.
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	os.WriteFile(a, []byte(file(rl("a", "b"))), 0o644)
	os.WriteFile(b, []byte(strings.Replace(file(rl("b", "a")), "key: ka", "key: kb", 1)), 0o644)
	_, err := LoadWith([]string{a, b}, LoadOptions{MergeDomains: true})
	if want := a + `:3: descriptors[0].rate_limit.replaces: the limits "a" → "b" → "a" replace each other in a ring`; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("merged files: %v, want %s…", err, want)
	}
}
