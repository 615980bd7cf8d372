package config

import (
	"strings"

	"go.yaml.in/yaml/v3"
)

// expand replaces ${VAR}, ${VAR:-default} and $${ in a scalar's text.
func (d *decoder) expand(key string, n *yaml.Node) (string, bool) {
	s := n.Value
	if !strings.Contains(s, "${") {
		return s, true
	}
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
		if end < 0 {
			d.Fail(n, key, "unterminated ${ in %q (write $${ for a literal ${)", n.Value)
			return "", false
		}
		inner := s[i+2 : i+end]
		s = s[i+end+1:]
		name, def, hasDef := strings.Cut(inner, ":-")
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
		case !set:
			d.Fail(n, key, "environment variable %s is not set (use ${%s:-default} for a default)", name, name)
			ok = false
			continue
		}
		b.WriteString(val)
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
