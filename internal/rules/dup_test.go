package rules

import (
	"errors"
	"strings"
	"testing"
)

// TestDuplicatesToldOnce: a key part or method listed again is told once
// for each item that repeats it, not once for each copy before it: a key
// of 3,000 "ip" (a 12 KB config) made 4.5 million problems and 900 MB.
func TestDuplicatesToldOnce(t *testing.T) {
	specs := []Spec{{Name: "a", Rate: "1/s", Line: 2,
		Key:   []string{"ip", "ip", "ip", "method", "ip"},
		Match: MatchSpec{Methods: []string{"GET", "get", "GET"}},
		Lines: map[string]int{"key[1]": 3, "key[2]": 3, "key[4]": 3, "match.methods[1]": 4, "match.methods[2]": 4}}}
	_, err := Compile("f.yaml", specs)
	var pes ParseErrors
	if !errors.As(err, &pes) {
		t.Fatalf("Compile error %T %v, want ParseErrors", err, err)
	}
	want := []string{
		`f.yaml:3: rules[0].key[1]: key part "ip" listed twice`,
		`f.yaml:3: rules[0].key[2]: key part "ip" listed twice`,
		`f.yaml:3: rules[0].key[4]: key part "ip" listed twice`,
		`f.yaml:4: rules[0].match.methods[1]: method GET listed twice`,
		`f.yaml:4: rules[0].match.methods[2]: method GET listed twice`,
	}
	if got := strings.Split(err.Error(), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Compile problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
