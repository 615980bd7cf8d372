package descriptors

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/internal/yamlnode"
)

// decoder walks YAML nodes, collecting every problem with its line.
type decoder struct {
	yamlnode.Walker
	// open holds the lists and descriptors being decoded, outer ones
	// included: an alias to one of them is a descriptor holding itself.
	open map[*yaml.Node]bool
}

// holdsItself reports, and tells, whether n at key is an alias to a list
// or descriptor being decoded (what, "list of descriptors" or
// "descriptor"), which would hold itself for ever; otherwise it marks the
// node n stands for open until the returned func is called.
func (d *decoder) holdsItself(key, what string, n *yaml.Node) (bool, func()) {
	r := n
	for r != nil && r.Kind == yaml.AliasNode {
		r = r.Alias
	}
	if r == nil {
		return false, func() {}
	}
	if d.open[r] {
		d.Fail(n, key, "the alias *%s is the %s that holds it: a descriptor cannot hold itself", n.Value, what)
		return true, nil
	}
	if d.open == nil {
		d.open = map[*yaml.Node]bool{}
	}
	d.open[r] = true
	return false, func() { delete(d.open, r) }
}

type fields map[string]func(key string, v *yaml.Node)

func (d *decoder) mapping(key string, n *yaml.Node, fs fields) {
	d.Mapping(key, n, sortedKeys(fs), func(name, path string, k, v *yaml.Node) {
		f := fs[name]
		if r, clean, ok := yamlnode.Invisible(name); f == nil && ok {
			msg := fmt.Sprintf("unknown key: it holds an invisible character, %U", r)
			if fs[clean] != nil {
				msg += fmt.Sprintf(" (did you mean %q?)", clean)
			}
			d.Fail(k, yamlnode.Join(key, strconv.Quote(name)), "%s", msg)
			return
		}
		if f == nil {
			d.Fail(k, path, "unknown key (want one of %s)", strings.Join(sortedKeys(fs), ", "))
			return
		}
		f(path, v)
	})
}

func (d *decoder) sequence(key string, n *yaml.Node, each func(key string, i int, v *yaml.Node)) {
	if n = d.Resolve(key, n); n == nil {
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.Fail(n, key, "want a list, not %s", yamlnode.KindName(n))
		return
	}
	for i, v := range n.Content {
		each(key+"["+strconv.Itoa(i)+"]", i, v)
	}
}

func (d *decoder) scalar(key string, n *yaml.Node, want string) (*yaml.Node, bool) {
	if n = d.Resolve(key, n); n == nil {
		return nil, false
	}
	if n.Kind != yaml.ScalarNode {
		d.Fail(n, key, "want %s, not %s", want, yamlnode.KindName(n))
		return nil, false
	}
	return n, true
}

func (d *decoder) str(dst *string) func(string, *yaml.Node) {
	return func(key string, v *yaml.Node) {
		n, ok := d.scalar(key, v, "a string")
		if !ok {
			return
		}
		switch n.Tag {
		case "!!str", "!!int", "!!float", "!!bool":
			*dst = n.Value
		default:
			d.Fail(n, key, "want a string, not %s", yamlnode.KindName(n))
		}
	}
}

// decoded decodes x at key with decode and reports whether it did without
// a problem: a value that did not is told once, and not checked again as
// the zero it left.
func (d *decoder) decoded(decode func(string, *yaml.Node), key string, x *yaml.Node) bool {
	n := len(d.Errs)
	decode(key, x)
	return len(d.Errs) == n
}

func (d *decoder) int64(dst *int64) func(string, *yaml.Node) {
	return func(key string, v *yaml.Node) {
		n, ok := d.scalar(key, v, "a whole number")
		if !ok {
			return
		}
		if n.Tag == "!!float" && !yamlnode.WholeNumber.MatchString(n.Value) {
			d.float(dst, key, n)
			return
		}
		if n.Tag != "!!int" && n.Tag != "!!float" {
			d.Fail(n, key, "want a whole number, not %s", yamlnode.KindName(n))
			return
		}
		x, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
		switch {
		case errors.Is(err, strconv.ErrRange) && strings.HasPrefix(n.Value, "-"):
			d.Fail(n, key, "%s is too small (at least %d)", n.Value, int64(math.MinInt64))
			return
		case errors.Is(err, strconv.ErrRange):
			d.Fail(n, key, "%s is too large (at most %d)", n.Value, int64(math.MaxInt64))
			return
		case err != nil:
			d.Fail(n, key, "%q is not a whole number in range", n.Value)
			return
		}
		*dst = x
	}
}

// float reads into dst a count written as a float (100.0, 1e+06), as the
// reference service's YAML library reads one into requests_per_unit: Helm
// renders a million given in its values as 1e+06, having read it as a
// float. One that is not whole is refused, where that library drops the
// fraction; so are infinities and NaN.
func (d *decoder) float(dst *int64, key string, n *yaml.Node) {
	f, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
	switch {
	case err == nil && (math.IsNaN(f) || f != math.Trunc(f)), err != nil && !errors.Is(err, strconv.ErrRange):
		d.Fail(n, key, "want a whole number, not %s", yamlnode.KindName(n))
	case f < math.MinInt64:
		d.Fail(n, key, "%s is too small (at least %d)", n.Value, int64(math.MinInt64))
	case f >= math.MaxInt64: // 2^63: no float64 lies between it and MaxInt64
		d.Fail(n, key, "%s is too large (at most %d)", n.Value, int64(math.MaxInt64))
	default:
		*dst = int64(f)
	}
}

func (d *decoder) int(dst *int) func(string, *yaml.Node) {
	return func(key string, v *yaml.Node) {
		var x int64
		before := len(d.Errs)
		d.int64(&x)(key, v)
		if len(d.Errs) > before {
			return
		}
		switch {
		case x < math.MinInt32:
			d.Fail(v, key, "%d is too small (at least %d)", x, math.MinInt32)
			return
		case x > math.MaxInt32:
			d.Fail(v, key, "%d is too large (at most %d)", x, math.MaxInt32)
			return
		}
		*dst = int(x)
	}
}

func (d *decoder) bool(dst *bool) func(string, *yaml.Node) {
	return func(key string, v *yaml.Node) {
		n, ok := d.scalar(key, v, "true or false")
		if !ok {
			return
		}
		if b, ok := yaml11Bool[n.Value]; ok && n.Tag == "!!str" && n.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle) == 0 {
			*dst = b // the reference service reads YAML 1.1: a plain yes is true
			return
		}
		if n.Tag != "!!bool" {
			d.Fail(n, key, "want true or false, not %s", yamlnode.KindName(n))
			return
		}
		b, err := strconv.ParseBool(strings.ToLower(n.Value))
		if err != nil {
			d.Fail(n, key, "want true or false, not %q", n.Value)
			return
		}
		*dst = b
	}
}

// yaml11Bool are the booleans of YAML 1.1 that YAML 1.2 reads as
// strings: the reference service's parser reads them as booleans.
var yaml11Bool = map[string]bool{
	"y": true, "Y": true, "yes": true, "Yes": true, "YES": true, "on": true, "On": true, "ON": true,
	"n": false, "N": false, "no": false, "No": false, "NO": false, "off": false, "Off": false, "OFF": false,
}

func (d *decoder) duration(dst *time.Duration) func(string, *yaml.Node) {
	return func(key string, v *yaml.Node) {
		n, ok := d.scalar(key, v, "a duration such as 50ms")
		if !ok {
			return
		}
		x, err := time.ParseDuration(n.Value)
		if n.Tag == "!!str" && err != nil && yamlnode.WellFormedDuration.MatchString(n.Value) {
			// Well formed, so it failed for being larger than a Duration holds.
			d.Fail(n, key, "%q is too large (at most %v)", n.Value, time.Duration(math.MaxInt64))
			return
		}
		if n.Tag != "!!str" || err != nil {
			d.Fail(n, key, "want a duration with a unit, such as 50ms or 2s, not %q", n.Value)
			return
		}
		*dst = x
	}
}

func sortedKeys(fs fields) []string {
	ks := make([]string, 0, len(fs))
	for k := range fs {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func yamlError(file string, data []byte, err error) *rules.ParseError {
	line, msg := yamlnode.Syntax(data, err)
	return &rules.ParseError{File: file, Line: line, Msg: "YAML syntax: " + msg}
}
