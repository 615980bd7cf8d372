package config

import (
	"encoding"
	"fmt"
	"math"
	"net/netip"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/yamlnode"
)

// The decoder walks the YAML nodes into the config structs, reading each
// struct's `yaml:"name"` tags as the keys it accepts. It knows these field
// types: string, bool, int, int64, time.Duration, netip.Prefix, maps of
// strings to strings (a mapping of any keys), any type
// whose pointer implements encoding.TextUnmarshaler (such as
// rules.AutoCount), structs (a mapping; one whose pointer is a boolSetter
// also a boolean), pointers to structs (nil when the
// block is absent), slices of any of these (a list), and embedded structs
// tagged `yaml:",inline"` (their keys join the outer mapping). A struct
// with untagged fields `Line int` and `Lines map[string]int` (rules.Spec)
// gets the line of its mapping and of each key below it, relative to it.

// decoder walks the YAML nodes into a Config, collecting every problem.
type decoder struct {
	yamlnode.Walker
	lookup func(string) (string, bool)
	lines  map[string]int // key path → line of its key
	// rel holds the lines of the keys below the struct being decoded
	// that keeps them (a rule), by their path below it, which is
	// relPrefix long; nil outside one. They are not in lines.
	rel       map[string]int
	relPrefix int
	// expanded holds the text, as written, of each key path whose value
	// took something from the environment (${VAR}), for problems to name
	// instead of a value that may be a secret.
	expanded map[string]string
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
	durationType     = reflect.TypeFor[time.Duration]()
	prefixType       = reflect.TypeFor[netip.Prefix]()
	trustedProxyType = reflect.TypeFor[TrustedProxy]()
	unmarshalType    = reflect.TypeFor[encoding.TextUnmarshaler]()
	boolSetType      = reflect.TypeFor[boolSetter]()
	linesType        = reflect.TypeFor[map[string]int]()
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
	case t == trustedProxyType && n != nil && n.Kind == yaml.MappingNode && len(n.Content) == 2 &&
		n.Content[0].Value == "unix" && isNull(n.Content[1]):
		// unix: unquoted, which YAML reads as the mapping {unix: null}.
		v.Set(reflect.ValueOf(TrustedProxy{Unix: true}))
		return true
	case reflect.PointerTo(t).Implements(unmarshalType):
		return d.text(key, n, v.Addr().Interface().(encoding.TextUnmarshaler))
	case t.Kind() == reflect.Struct && reflect.PointerTo(t).Implements(boolSetType):
		return d.boolOrMapping(key, n, v)
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
	case reflect.Map:
		if t.Key().Kind() != reflect.String || t.Elem().Kind() != reflect.String {
			break
		}
		return d.strings(key, n, v)
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

// boolSetter is a struct that a YAML boolean also sets: its key is true,
// false, or a mapping of its fields, which counts as true
// (store.redis.tls).
type boolSetter interface{ setBool(bool) }

// boolOrMapping decodes n, a boolean or a mapping, into the boolSetter v.
func (d *decoder) boolOrMapping(key string, n *yaml.Node, v reflect.Value) bool {
	r := n
	for r != nil && r.Kind == yaml.AliasNode {
		r = r.Alias
	}
	set := v.Addr().Interface().(boolSetter)
	switch {
	case r == nil || (r.Kind == yaml.ScalarNode && r.Tag == "!!null"):
		return false
	case r.Kind == yaml.MappingNode:
		ok := d.structure(key, n, v)
		set.setBool(true)
		return ok
	case r.Kind == yaml.ScalarNode && (r.Tag == "!!bool" || strings.Contains(r.Value, "${")):
		b, ok := d.bool(key, n)
		if ok {
			set.setBool(b)
		}
		return ok
	}
	names := infoOf(v.Type()).names
	want := strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
	if d.Resolve(key, n) != nil {
		d.Fail(r, key, "want true or false, or a mapping of %s, not %s", want, yamlnode.KindName(r))
	}
	return false
}

// structure decodes the mapping n into the struct v, key by key. It
// records the line of every key (see line) and reports unknown and
// repeated keys.
func (d *decoder) structure(key string, n *yaml.Node, v reflect.Value) bool {
	si := infoOf(v.Type())
	if si.lines != nil {
		// A rule: its lines are kept relative to it too.
		rel, relPrefix := d.rel, d.relPrefix
		d.rel, d.relPrefix = map[string]int{}, len(key)+1
		defer func() {
			v.FieldByIndex(si.lines).Set(reflect.ValueOf(d.rel))
			d.rel, d.relPrefix = rel, relPrefix
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
			if r, clean, ok := yamlnode.Invisible(name); ok {
				// A zero-width space pasted in, a byte order mark of a
				// file joined to another: the key looks like one it is not.
				msg := fmt.Sprintf("unknown key: it holds an invisible character, %U", r)
				if si.byName[clean] != nil {
					msg += fmt.Sprintf(" (did you mean %q?)", clean)
				}
				d.Fail(k, yamlnode.Join(key, strconv.Quote(name)), "%s", msg)
				return
			}
		}
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
		d.line(path, k.Line)
		d.value(path, val, v.FieldByIndex(f.index))
	})
}

// slice decodes the list n into the slice v. A list given, even empty,
// makes a non-nil slice. Items that fail to decode are kept as zero values
// (their problem is reported), except addresses, which are left out.
func (d *decoder) slice(key string, n *yaml.Node, v reflect.Value) bool {
	n = d.Resolve(key, n)
	size := 0
	if n != nil && n.Kind == yaml.SequenceNode {
		size = len(n.Content)
	}
	// Decoded in place, item by item, not appended: 25,000 rules copied
	// as the slice grows were 95 MB.
	out := reflect.MakeSlice(v.Type(), size, size)
	kept := 0
	defer func() { v.Set(out.Slice(0, kept)) }()
	if n == nil {
		return false
	}
	if n.Kind != yaml.SequenceNode {
		d.Fail(n, key, "want a list such as [a, b], not %s", yamlnode.KindName(n))
		return false
	}
	et := v.Type().Elem()
	for i, item := range n.Content {
		k := key + "[" + strconv.Itoa(i) + "]"
		d.line(k, item.Line)
		e := out.Index(kept)
		if isNull(item) {
			// Kept as a zero value (a prefix left out), as items that
			// fail are: the problems that would follow are not told.
			d.Fail(item, k, "empty item (a lone - or ~): give a value or remove it")
			if et == prefixType || et == trustedProxyType {
				continue
			}
		} else if !d.value(k, item, e) && (et == prefixType || et == trustedProxyType) {
			e.SetZero() // its slot is the next item's
			continue
		}
		kept++
	}
	return true
}

// line records the line of the key at path: below a rule, in the rule's
// Lines only (see lineIn), as a map of every key of 25,000 rules cost a
// fifth of a parse.
func (d *decoder) line(path string, l int) {
	if d.rel != nil {
		d.rel[path[d.relPrefix:]] = l
		return
	}
	d.lines[path] = l
}

// strings decodes the mapping n, of any keys with string values, into the
// map v (grpc.xds.node_metadata). A mapping given, even empty, makes a
// non-nil map.
func (d *decoder) strings(key string, n *yaml.Node, v reflect.Value) bool {
	out := reflect.MakeMap(v.Type())
	ok := d.Mapping(key, n, []string{"any name: a string"}, func(name, path string, k, val *yaml.Node) {
		d.line(path, k.Line)
		if s, ok := d.str(path, val); ok {
			out.SetMapIndex(reflect.ValueOf(name).Convert(v.Type().Key()), reflect.ValueOf(s).Convert(v.Type().Elem()))
		}
	})
	if ok {
		v.Set(out)
	}
	return ok
}

// isNull reports whether n, aliases followed, is a null value.
func isNull(n *yaml.Node) bool {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n != nil && n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}
