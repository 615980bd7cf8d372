package config

import (
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// expand replaces ${VAR}, ${VAR:-default} and $${ in a scalar's text.
func (d *decoder) expand(key string, n *yaml.Node) (string, bool) {
	s := n.Value
	if !strings.Contains(s, "${") {
		return s, true
	}
	// A password holding ${ that is not one reference (a generated
	// password with "${" in it, written in the file) must not be quoted,
	// not even in part, in a problem that every refused reload logs:
	// those problems say where the ${ is instead.
	secret := strings.HasSuffix(key, "password") && !(strings.HasPrefix(s, "${") && strings.HasSuffix(s, "}"))
	at := func(rest string, i int) int { return utf8.RuneCountInString(n.Value[:len(n.Value)-len(rest)+i]) + 1 }
	var b strings.Builder
	ok := true
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			break
		}
		if i > 0 && s[i-1] == '$' { // $${ is a literal ${
			b.WriteString(s[:i-1])
			b.WriteString("${")
			s = s[i+2:]
			continue
		}
		b.WriteString(s[:i])
		end := strings.IndexByte(s[i:], '}')
		if end < 0 && secret {
			d.Fail(n, key, "unterminated ${ at character %d (the value is not shown; write $${ for a literal ${)", at(s, i))
			return "", false
		}
		if end < 0 {
			d.Fail(n, key, "unterminated ${ in %q (write $${ for a literal ${)", n.Value)
			return "", false
		}
		pos := at(s, i)
		inner := s[i+2 : i+end]
		s = s[i+end+1:]
		name, def, hasDef := strings.Cut(inner, ":-")
		if secret && (hasDef && strings.Contains(def, "${") || !validEnvName(name)) {
			d.Fail(n, key, "the ${ at character %d starts no environment variable reference (the value is not shown; write $${ for a literal ${)", pos)
			return "", false
		}
		if hasDef && strings.Contains(def, "${") {
			// The first } closed the inner ${: expanding on would give
			// "${VAR" or "value}".
			d.Fail(n, key, "${%s:-…}: a ${ inside a default is not supported: write the default out", name)
			return "", false
		}
		if !validEnvName(name) {
			d.Fail(n, key, "${%s}: %q is not an environment variable name", inner, name)
			ok = false
			continue
		}
		val, set := d.lookup(name)
		switch {
		case hasDef && val == "":
			val = def
		case !set && secret:
			d.Fail(n, key, "the environment variable named at character %d is not set (the value is not shown; use ${VAR:-default} for a default, $${ for a literal ${)", pos)
			ok = false
			continue
		case !set:
			d.Fail(n, key, "environment variable %s is not set (use ${%s:-default} for a default)", name, name)
			ok = false
			continue
		}
		b.WriteString(val)
		if d.expanded != nil {
			d.expanded[key] = n.Value
		}
	}
	return b.String(), ok
}

func validEnvName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return s != ""
}
