package config

import (
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/rules"
)

// lineIn finds the line of key, or of its nearest enclosing key that was
// written, and reports whether key itself was. lines holds the lines of
// the keys outside the rules and of the rules themselves ("rules[2]");
// those of the keys below a rule are in its Spec.Lines, by their path
// below it ("sync", "key[1]"). Nil lines (a Config built in Go): 0, false.
func lineIn(lines map[string]int, specs []rules.Spec, key string) (int, bool) {
	if lines == nil {
		return 0, false
	}
	if i, below, ok := belowRule(key); ok && i < len(specs) {
		if l, ok := specs[i].Lines[below]; ok {
			return l, true
		}
		if l := lineOf(specs[i].Lines, below); l > 0 {
			return l, false
		}
	}
	if l, ok := lines[key]; ok {
		return l, true
	}
	return lineOf(lines, key), false
}

// belowRule splits "rules[I].PATH" into I and PATH.
func belowRule(key string) (i int, below string, ok bool) {
	rest, ok := strings.CutPrefix(key, "rules[")
	if !ok {
		return 0, "", false
	}
	n, below, ok := strings.Cut(rest, "].")
	if !ok {
		return 0, "", false
	}
	i, err := strconv.Atoi(n)
	if err != nil || i < 0 || strconv.Itoa(i) != n {
		return 0, "", false
	}
	return i, below, true
}

// lineOf finds the line of key, or of its nearest enclosing key, in lines.
func lineOf(lines map[string]int, key string) int {
	for key != "" {
		if l, ok := lines[key]; ok {
			return l
		}
		i := strings.LastIndexAny(key, ".[")
		if i < 0 {
			break
		}
		key = key[:i]
	}
	return 0
}

// line finds the line of key (see lineIn).
func (ck *checker) line(key string) int {
	l, _ := lineIn(ck.lines, ck.rules, key)
	return l
}

// written returns the key paths written in the file c was parsed from,
// those below the rules included, in no order.
func (c *Config) written() []string {
	keys := make([]string, 0, len(c.lines))
	for k := range c.lines {
		keys = append(keys, k)
	}
	for i := range c.Rules {
		rule := "rules[" + strconv.Itoa(i) + "]."
		for k := range c.Rules[i].Lines {
			keys = append(keys, rule+k)
		}
	}
	return keys
}
