package rules

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clientip"
)

// sourceSpecs are rules that compile, with every list and pointer of Spec
// given.
func sourceSpecs() []Spec {
	return []Spec{
		{Name: "a", Rate: "10/s", Match: MatchSpec{Methods: []string{"GET", "POST"}, Path: "/a/*"}, Key: []string{"ip", "method"}, Line: 3, Lines: map[string]int{"rate": 4}},
		{Name: "b", Rate: "5/m", Action: "defer", Defer: &DeferSpec{MaxQueue: 10}},
		{Name: "c", Rate: "1/s", Action: "delay", MaxDelay: time.Second},
	}
}

// TestCompiledFrom: a Set knows the specs and options it was compiled
// from as they were, so a change made in place since (an item of a list
// the caller still holds) is seen; their lines are not part of it.
func TestCompiledFrom(t *testing.T) {
	o := Options{IP: clientip.Prefixes{IPv4: 24, IPv6: 48}}
	specs := sourceSpecs()
	set, err := CompileWith("f.yaml", specs, o)
	if err != nil {
		t.Fatal(err)
	}
	if !set.CompiledFrom(specs, o) {
		t.Fatal("CompiledFrom(the specs it was compiled from) = false")
	}
	if !set.CompiledFrom(sourceSpecs(), o) {
		t.Error("CompiledFrom(an equal copy) = false")
	}
	moved := sourceSpecs()
	moved[0].Line, moved[0].Lines = 30, map[string]int{"rate": 40}
	if !set.CompiledFrom(moved, o) {
		t.Error("CompiledFrom(the specs on other lines) = false: lines only name problems")
	}
	for name, change := range map[string]func(s []Spec){
		"a method changed in place":   func(s []Spec) { s[0].Match.Methods[1] = "PUT" },
		"a key part changed in place": func(s []Spec) { s[0].Key[0] = "path" },
		"defer changed in place":      func(s []Spec) { s[1].Defer.MaxQueue = 11 },
		"a rule removed":              func(s []Spec) { copy(s, s[1:]); s[2] = Spec{} },
		"the rate changed":            func(s []Spec) { s[2].Rate = "2/s" },
	} {
		changed := specs
		if !strings.Contains(name, "in place") {
			changed = sourceSpecs()
		}
		change(changed)
		if set.CompiledFrom(changed, o) {
			t.Errorf("%s: CompiledFrom = true", name)
		}
		specs = sourceSpecs()
	}
	if set.CompiledFrom(sourceSpecs(), Options{}) {
		t.Error("CompiledFrom(other options) = true")
	}
	if set.CompiledFrom(sourceSpecs()[:2], o) {
		t.Error("CompiledFrom(fewer specs) = true")
	}
	if (&Set{}).CompiledFrom(nil, Options{}) || (*Set)(nil).CompiledFrom(nil, Options{}) {
		t.Error("a Set Compile did not make: CompiledFrom(nothing) = true")
	}
	empty, err := Compile("f.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !empty.CompiledFrom(nil, Options{}) || !empty.CompiledFrom([]Spec{}, Options{}) {
		t.Error("Compile(no rules): CompiledFrom(no rules) = false")
	}
}

// TestCompiledFromSeesEveryField changes each field of Spec, one at a
// time, by reflection: CompiledFrom must tell every one (but the lines),
// so a field added to Spec and left out of sameSpec fails here rather
// than make the daemon run rules a Config no longer holds.
func TestCompiledFromSeesEveryField(t *testing.T) {
	specs := sourceSpecs()
	set, err := Compile("f.yaml", specs)
	if err != nil {
		t.Fatal(err)
	}
	var leaves func(t reflect.Type, path []int, name string, f func(path []int, name string))
	leaves = func(t reflect.Type, path []int, name string, f func(path []int, name string)) {
		for i := range t.NumField() {
			sf := t.Field(i)
			p := append(append([]int(nil), path...), i)
			n := name + "." + sf.Name
			if len(path) == 0 && (sf.Name == "Line" || sf.Name == "Lines") {
				continue
			}
			if sf.Type.Kind() == reflect.Struct && sf.Type.NumField() > 0 && sf.Type != reflect.TypeFor[time.Duration]() {
				leaves(sf.Type, p, n, f)
				continue
			}
			f(p, n)
		}
	}
	tried := 0
	leaves(reflect.TypeFor[Spec](), nil, "Spec", func(path []int, name string) {
		for _, i := range []int{0, 1} { // rule a has lists, rule b a defer block
			changed := sourceSpecs()
			v := reflect.ValueOf(&changed[i]).Elem().FieldByIndex(path)
			switch v.Kind() {
			case reflect.String:
				v.SetString(v.String() + "x")
			case reflect.Bool:
				v.SetBool(!v.Bool())
			case reflect.Int, reflect.Int64:
				v.SetInt(v.Int() + 1)
			case reflect.Slice:
				if v.Len() == 0 {
					if v.IsNil() {
						v.Set(reflect.MakeSlice(v.Type(), 0, 0)) // nil to empty
					} else {
						v.SetZero()
					}
				} else {
					v.Set(reflect.Append(v, v.Index(0)))
				}
			case reflect.Pointer:
				if v.IsNil() {
					v.Set(reflect.New(v.Type().Elem()))
				} else {
					e := v.Elem()
					for j := range e.NumField() {
						if e.Field(j).Kind() != reflect.Int && e.Field(j).Kind() != reflect.Int64 {
							t.Fatalf("%s: field %s of kind %s: teach this test to change it", name, e.Type().Field(j).Name, e.Field(j).Kind())
						}
						changed := sourceSpecs()
						f := reflect.ValueOf(&changed[i]).Elem().FieldByIndex(path).Elem().Field(j)
						f.SetInt(f.Int() + 1)
						if set.CompiledFrom(changed, Options{}) {
							t.Errorf("rules[%d]: %s.%s changed: CompiledFrom = true", i, name, e.Type().Field(j).Name)
						}
					}
					v.SetZero()
				}
			default:
				t.Fatalf("%s of kind %s: teach this test to change it", name, v.Kind())
			}
			tried++
			if set.CompiledFrom(changed, Options{}) {
				t.Errorf("rules[%d]: %s changed: CompiledFrom = true", i, name)
			}
		}
	})
	if tried < 2*17 {
		t.Errorf("changed %d fields, want at least %d: has the walk stopped going down?", tried, 2*17)
	}
}
