package rules

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// methodsOf returns n different method names.
func methodsOf(n int) []string {
	ms := make([]string, n)
	for i := range ms {
		ms[i] = fmt.Sprintf("M%d", i)
	}
	return ms
}

// partsOf returns n different key parts.
func partsOf(n int) []string {
	ps := make([]string, n)
	for i := range ps {
		ps[i] = fmt.Sprintf("header:X-%d", i)
	}
	return ps
}

// TestListCaps: a rule may list up to MaxMethods methods and MaxKeyParts
// key parts; one more is refused with one problem naming the file, the
// line of the key, the rule (by its place and its name) and the bound,
// and nothing about the items themselves, however many there are.
func TestListCaps(t *testing.T) {
	lines := map[string]int{"match.methods": 4, "key": 6}
	if _, err := Compile("f.yaml", []Spec{{Name: "at-bound", Rate: "1/s", Match: MatchSpec{Methods: methodsOf(MaxMethods)}, Key: partsOf(MaxKeyParts)}}); err != nil {
		t.Fatalf("%d methods and %d key parts: %v", MaxMethods, MaxKeyParts, err)
	}
	for _, tc := range []struct {
		spec Spec
		want string
	}{
		{Spec{Name: "many-methods", Rate: "1/s", Match: MatchSpec{Methods: methodsOf(MaxMethods + 1)}},
			`f.yaml:4: rules[0].match.methods: rule "many-methods" lists 65 methods, more than the 64 a rule may: each request's method is looked for among them`},
		{Spec{Name: "many-parts", Rate: "1/s", Key: partsOf(MaxKeyParts + 1)},
			`f.yaml:6: rules[0].key: rule "many-parts" has 17 key parts, more than the 16 a rule may: each is read from every request the rule matches`},
		// A million items, bad ones and repeats among them: one problem.
		{Spec{Name: "million", Rate: "1/s", Match: MatchSpec{Methods: append(methodsOf(1_000_000), "GET", "GET", "no good")}},
			`f.yaml:4: rules[0].match.methods: rule "million" lists 1000003 methods, more than the 64 a rule may: each request's method is looked for among them`},
		{Spec{Name: "million", Rate: "1/s", Key: append(partsOf(1_000_000), "ip", "ip", "nope")},
			`f.yaml:6: rules[0].key: rule "million" has 1000003 key parts, more than the 16 a rule may: each is read from every request the rule matches`},
		{Spec{Rate: "1/s", Key: partsOf(MaxKeyParts + 1)},
			`f.yaml:6: rules[0].key: the rule has 17 key parts, more than the 16 a rule may: each is read from every request the rule matches`},
	} {
		tc.spec.Line, tc.spec.Lines = 2, lines
		_, err := Compile("f.yaml", []Spec{tc.spec})
		var pes ParseErrors
		if !errors.As(err, &pes) {
			t.Fatalf("%s: Compile error %T %v, want ParseErrors", tc.spec.Name, err, err)
		}
		var got []string
		for _, pe := range pes {
			if pe.Key != "rules[0].name" {
				got = append(got, pe.Error())
			}
		}
		if strings.Join(got, "\n") != tc.want {
			t.Errorf("%s: Compile problems:\n%s\nwant:\n%s", tc.spec.Name, strings.Join(got, "\n"), tc.want)
		}
	}
}
