package config

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/internal/yamlnode"
)

// The decoder walks the YAML nodes into the config structs, reading each
// struct's `yaml:"name"` tags as the keys it accepts. It knows these field
// types: string, bool, int, int64, time.Duration, netip.Prefix, any type
// whose pointer implements encoding.TextUnmarshaler (such as
// rules.AutoCount), structs (a mapping), pointers to structs (nil when the
// block is absent), slices of any of these (a list), and embedded structs
// tagged `yaml:",inline"` (their keys join the outer mapping). A struct
// with untagged fields `Line int` and `Lines map[string]int` (rules.Spec)
// gets the line of its mapping and of each key below it, relative to it.

// parseYAML reads the single document of data.
func parseYAML(file string, data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, Errors{{File: file, Line: 1, Msg: "empty config: want a mapping such as listen: 127.0.0.1:8080"}}
		}
		return nil, Errors{yamlError(file, data, err)}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, Errors{{File: file, Line: extra.Line, Msg: "more than one YAML document (---): a config is one document"}}
	} else if !errors.Is(err, io.EOF) {
		return nil, Errors{yamlError(file, data, err)}
	}
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		return doc.Content[0], nil
	}
	return &doc, nil
}

// wholeNumber matches the text of a whole number too long for YAML to
// resolve as an int (it resolves it as a float).
var wholeNumber = regexp.MustCompile(`^[-+]?[0-9][0-9_]*$`)

// wellFormedDuration matches what time.ParseDuration reads, when it is not
// too large.
var wellFormedDuration = regexp.MustCompile(`^[-+]?([0-9]*(\.[0-9]*)?(ns|us|µs|μs|ms|s|m|h))+$`)

// yamlError turns a YAML syntax error into a ParseError with its line.
func yamlError(file string, data []byte, err error) *rules.ParseError {
	line, msg := yamlnode.SyntaxError(err)
	switch {
	case strings.HasPrefix(msg, "did not find expected ',' or") && strings.Contains(lineText(data, line), "${"):
		msg += `: a value holding ${…} inside [ ] or { } must be quoted, as in key: ["header:${VAR}"]`
	case msg == "did not find expected key" || msg == "did not find expected '-' indicator":
		// The line is where the enclosing block starts, not the culprit.
		msg += " in the block that starts here: check the indentation of the lines below it"
	}
	return &rules.ParseError{File: file, Line: line, Msg: "YAML syntax: " + msg}
}

// lineText returns line n (from 1) of data, or "".
func lineText(data []byte, n int) string {
	for i := 1; len(data) > 0; i++ {
		l, rest, _ := bytes.Cut(data, []byte("\n"))
		if i == n {
			return string(l)
		}
		data = rest
	}
	return ""
}

// decoder walks the YAML nodes into a Config, collecting every problem.
type decoder struct {
	yamlnode.Walker
	lookup func(string) (string, bool)
	lines  map[string]int // key path → line of its key
}

// field is one key of a struct: its name and where it is in the struct.
type field struct {
	name  string
	index []int
}

// structInfo is what the decoder knows of a struct type.
type structInfo struct {
	fields []field // sorted by name
	byName map[string]*field
	names  []string // sorted
	// line and lines are the indexes of the Line and Lines fields, or nil.
	line, lines []int
}

var structInfos sync.Map // reflect.Type → *structInfo

var (
	durationType  = reflect.TypeFor[time.Duration]()
	prefixType    = reflect.TypeFor[netip.Prefix]()
	unmarshalType = reflect.TypeFor[encoding.TextUnmarshaler]()
	linesType     = reflect.TypeFor[map[string]int]()
)

// infoOf returns the keys of the struct type t, read from its yaml tags.
func infoOf(t reflect.Type) *structInfo {
	if si, ok := structInfos.Load(t); ok {
		return si.(*structInfo)
	}
	si := &structInfo{byName: map[string]*field{}}
	var walk func(t reflect.Type, index []int)
	walk = func(t reflect.Type, index []int) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			idx := append(append([]int(nil), index...), i)
			tag, hasTag := f.Tag.Lookup("yaml")
			switch {
			case tag == ",inline" && f.Type.Kind() == reflect.Struct:
				walk(f.Type, idx)
			case hasTag && tag != "-" && tag != "":
				si.fields = append(si.fields, field{name: tag, index: idx})
			case !hasTag && len(index) == 0 && f.Name == "Line" && f.Type.Kind() == reflect.Int:
				si.line = idx
			case !hasTag && len(index) == 0 && f.Name == "Lines" && f.Type == linesType:
				si.lines = idx
			}
		}
	}
	walk(t, nil)
	sort.Slice(si.fields, func(i, j int) bool { return si.fields[i].name < si.fields[j].name })
	for i := range si.fields {
		f := &si.fields[i]
		if si.byName[f.name] != nil {
			panic("config: key " + f.name + " declared twice in " + t.String())
		}
		si.byName[f.name] = f
		si.names = append(si.names, f.name)
	}
	v, _ := structInfos.LoadOrStore(t, si)
	return v.(*structInfo)
}

// value decodes n into v, which must be settable, according to v's type.
// It reports whether it decoded a value (false after reporting a problem,
// and for an absent or null value).
func (d *decoder) value(key string, n *yaml.Node, v reflect.Value) bool {
	t := v.Type()
	switch {
	case t == durationType:
		x, ok := d.duration(key, n)
		if ok {
			v.SetInt(int64(x))
		}
		return ok
	case t == prefixType:
		s, ok := d.str(key, n)
		if !ok || s == "" {
			return false
		}
		p, err := parsePrefix(s)
		if err != nil {
			d.Fail(n, key, "%v", err)
			return false
		}
		v.Set(reflect.ValueOf(p))
		return true
	case reflect.PointerTo(t).Implements(unmarshalType):
		return d.text(key, n, v.Addr().Interface().(encoding.TextUnmarshaler))
	}
	switch t.Kind() {
	case reflect.String:
		s, ok := d.str(key, n)
		if ok {
			v.SetString(s)
		}
		return ok
	case reflect.Bool:
		b, ok := d.bool(key, n)
		if ok {
			v.SetBool(b)
		}
		return ok
	case reflect.Int64:
		x, ok := d.int64(key, n)
		if ok {
			v.SetInt(x)
		}
		return ok
	case reflect.Int:
		x, ok := d.int64(key, n)
		if ok && x > math.MaxInt32 {
			d.Fail(n, key, "%d is too large (at most %d)", x, math.MaxInt32)
			return false
		}
		if ok && x < math.MinInt32 {
			d.Fail(n, key, "%d is too small (at least %d)", x, math.MinInt32)
			return false
		}
		if ok {
			v.SetInt(x)
		}
		return ok
	case reflect.Slice:
		return d.slice(key, n, v)
	case reflect.Struct:
		return d.structure(key, n, v)
	case reflect.Pointer:
		if t.Elem().Kind() != reflect.Struct {
			break
		}
		if d.Resolve(key, n) == nil {
			return false
		}
		p := reflect.New(t.Elem())
		v.Set(p)
		return d.structure(key, n, p.Elem())
	}
	panic(fmt.Sprintf("config: key %s: field type %s is not supported by the decoder", key, t))
}

// structure decodes the mapping n into the struct v, key by key. It
// records the line of every key in d.lines and reports unknown and
// repeated keys.
func (d *decoder) structure(key string, n *yaml.Node, v reflect.Value) bool {
	si := infoOf(v.Type())
	if si.lines != nil {
		// A rule: its lines are kept relative to it too.
		outer := d.lines
		d.lines = map[string]int{}
		defer func() {
			rel := map[string]int{}
			prefix := key + "."
			for k, l := range d.lines {
				outer[k] = l
				if r, ok := strings.CutPrefix(k, prefix); ok {
					rel[r] = l
				}
			}
			d.lines = outer
			v.FieldByIndex(si.lines).Set(reflect.ValueOf(rel))
		}()
		if r := d.Resolve(key, n); r != nil && si.line != nil {
			v.FieldByIndex(si.line).SetInt(int64(r.Line))
		}
	}
	return d.mapping(key, n, si, v)
}

func (d *decoder) mapping(key string, n *yaml.Node, si *structInfo, v reflect.Value) bool {
	return d.Mapping(key, n, si.names, func(name, path string, k, val *yaml.Node) {
		f := si.byName[name]
		if f == nil {
			msg := "unknown key"
			if s := suggest(name, si.names); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			} else {
				msg += fmt.Sprintf(" (want one of %s)", strings.Join(si.names, ", "))
			}
			d.Fail(k, path, "%s", msg)
			return
		}
		d.lines[path] = k.Line
		d.value(path, val, v.FieldByIndex(f.index))
	})
}

// slice decodes the list n into the slice v. A list given, even empty,
// makes a non-nil slice. Items that fail to decode are kept as zero values
// (their problem is reported), except addresses, which are left out.
func (d *decoder) slice(key string, n *yaml.Node, v reflect.Value) bool {
	out := reflect.MakeSlice(v.Type(), 0, 0)
	defer func() { v.Set(out) }()
	if n = d.Resolve(key, n); n == nil {
		return false
	}
	if n.Kind != yaml.SequenceNode {
		d.Fail(n, key, "want a list such as [a, b], not %s", yamlnode.KindName(n))
		return false
	}
	et := v.Type().Elem()
	for i, item := range n.Content {
		k := key + "[" + strconv.Itoa(i) + "]"
		d.lines[k] = item.Line
		e := reflect.New(et).Elem()
		if !d.value(k, item, e) && et == prefixType {
			continue
		}
		out = reflect.Append(out, e)
	}
	return true
}

// scalar returns the text of a scalar value with ${VAR} expanded, or false
// (after reporting) when it is not a scalar or expansion fails. want names
// the expected type in messages.
func (d *decoder) scalar(key string, n *yaml.Node, want string) (string, *yaml.Node, bool) {
	if n = d.Resolve(key, n); n == nil {
		return "", nil, false
	}
	if n.Kind != yaml.ScalarNode {
		d.Fail(n, key, "want %s, not %s", want, yamlnode.KindName(n))
		return "", nil, false
	}
	s, ok := d.expand(key, n)
	return s, n, ok
}

func (d *decoder) str(key string, v *yaml.Node) (string, bool) {
	s, n, ok := d.scalar(key, v, "a string")
	if !ok {
		return "", false
	}
	switch n.Tag {
	case "!!str", "!!int", "!!float":
		return s, true
	}
	d.Fail(n, key, "want a string, not %s", yamlnode.KindName(n))
	return "", false
}

// text decodes a scalar through its type's UnmarshalText.
func (d *decoder) text(key string, v *yaml.Node, dst encoding.TextUnmarshaler) bool {
	s, ok := d.str(key, v)
	if !ok {
		return false
	}
	if err := dst.UnmarshalText([]byte(s)); err != nil {
		d.Fail(v, key, "%v", err)
		return false
	}
	return true
}

func (d *decoder) int64(key string, v *yaml.Node) (int64, bool) {
	s, n, ok := d.scalar(key, v, "a whole number")
	if !ok {
		return 0, false
	}
	if n.Tag != "!!int" && !(n.Tag == "!!str" && strings.Contains(n.Value, "${")) && !wholeNumber.MatchString(s) {
		d.Fail(n, key, "want a whole number, not %s", yamlnode.KindName(n))
		return 0, false
	}
	x, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 0, 64)
	switch {
	case err != nil && errors.Is(err, strconv.ErrRange) && strings.HasPrefix(s, "-"):
		d.Fail(n, key, "%s is too small (at least %d)", s, int64(math.MinInt64))
		return 0, false
	case err != nil && errors.Is(err, strconv.ErrRange):
		d.Fail(n, key, "%s is too large (at most %d)", s, int64(math.MaxInt64))
		return 0, false
	case err != nil:
		d.Fail(n, key, "%q is not a whole number", s)
		return 0, false
	}
	return x, true
}

func (d *decoder) bool(key string, v *yaml.Node) (bool, bool) {
	s, n, ok := d.scalar(key, v, "true or false")
	if !ok {
		return false, false
	}
	if n.Tag != "!!bool" && !(n.Tag == "!!str" && strings.Contains(n.Value, "${")) {
		d.Fail(n, key, "want true or false, not %s", yamlnode.KindName(n))
		return false, false
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		d.Fail(n, key, "want true or false, not %q", s)
		return false, false
	}
	return b, true
}

func (d *decoder) duration(key string, v *yaml.Node) (time.Duration, bool) {
	s, n, ok := d.scalar(key, v, "a duration such as 50ms")
	if !ok {
		return 0, false
	}
	if n.Tag != "!!str" {
		d.Fail(n, key, "want a duration with a unit, such as 50ms or 2s, not %s", yamlnode.KindName(n))
		return 0, false
	}
	x, err := time.ParseDuration(s)
	if err != nil && wellFormedDuration.MatchString(s) {
		// Well formed, so it failed for being larger than a Duration holds.
		d.Fail(n, key, "%q is too large (at most %v)", s, time.Duration(math.MaxInt64))
		return 0, false
	}
	if err != nil {
		d.Fail(n, key, "%q is not a duration (want a number and a unit, such as 50ms, 2s or 1m30s)", s)
		return 0, false
	}
	if x < 0 {
		d.Fail(n, key, "%v must not be negative", x)
		return 0, false
	}
	return x, true
}

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

// suggest returns the known key closest to name, if it is close.
func suggest(name string, names []string) string {
	best, bestD := "", 3
	for _, k := range names {
		if dd := editDistance(strings.ToLower(name), k); dd < bestD {
			best, bestD = k, dd
		}
	}
	return best
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// parsePrefix reads a CIDR, or a single address as a /32 or /128.
func parsePrefix(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR (such as 10.0.0.0/8) or an address", s)
		}
		a = a.Unmap().WithZone("")
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR such as 10.0.0.0/8 or fd00::/8", s)
	}
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("%q has bits set past the prefix length; did you mean %s?", s, p.Masked())
	}
	return p, nil
}
