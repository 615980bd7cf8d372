package rules

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// TestPartNameCap: a header, query or cookie key part's NAME may be up to
// MaxPartName bytes; one byte more is refused with one problem naming the
// file, the line of the key part, the rule and the part (cut short, not
// echoed whole), and nothing compiled.
func TestPartNameCap(t *testing.T) {
	lines := map[string]int{"key[1]": 7}
	at := strings.Repeat("n", MaxPartName)
	for _, kind := range []string{"header", "query", "cookie"} {
		if _, err := Compile("f.yaml", []Spec{{Name: "at-bound", Rate: "1/s", Key: []string{"ip", kind + ":" + at}}}); err != nil {
			t.Fatalf("%s name of %d bytes: %v", kind, MaxPartName, err)
		}
		for _, n := range []int{MaxPartName + 1, 1 << 20} {
			part := kind + ":" + strings.Repeat("n", n)
			rs, err := Compile("f.yaml", []Spec{{Name: "api", Rate: "1/s", Key: []string{"ip", part}, Line: 2, Lines: lines}})
			var pes ParseErrors
			if !errors.As(err, &pes) || len(pes) != 1 {
				t.Fatalf("%s name of %d bytes: Compile = %v, %v; want one problem", kind, n, rs, err)
			}
			want := `f.yaml:7: rules[0].key[1]: rule "api": key part "` + kind + `:nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn…" has a name of ` +
				strconv.Itoa(n) + ` bytes, more than the 256 a name may: it is read from every request the rule matches`
			if got := pes[0].Error(); got != want {
				t.Errorf("%s name of %d bytes:\n got %s\nwant %s", kind, n, got, want)
			}
			if rs != nil {
				t.Errorf("%s name of %d bytes: compiled %v", kind, n, rs)
			}
		}
	}
}

// TestPartNameImpossible: a header, query or cookie key part whose NAME
// no request carries as written is refused at load, with one problem
// naming the file, the line of the part, the part and what is wrong with
// it, and nothing compiled: query:a&b (a request's "a&b" is two
// parameters, a and b), a query name with =, #, ; or an escape (+, %),
// a header name with a space or a colon, a cookie name with ; or =.
// Names a request can carry are taken.
func TestPartNameImpossible(t *testing.T) {
	lines := map[string]int{"key[1]": 7}
	for _, tc := range []struct {
		part string
		want string // in the problem, after the part
	}{
		{"query:a&b", "& separates"},
		{"query:a=b", "= ends"},
		{"query:a#b", "# ends"},
		{"query:a;b", ";"},
		{"query:a+b", "+"},
		{"query:a%20b", "%"},
		{"query:a\tb", "control"},
		{"header:X Api", "space"},
		{"header:X:Api", "colon"},
		{"header:X;Api", "';'"},
		{"cookie:a;b", "; separates cookies"},
		{"cookie:a=b", "= ends"},
		{"cookie:a b", "space"},
	} {
		rs, err := Compile("f.yaml", []Spec{{Name: "api", Rate: "1/s", Key: []string{"ip", tc.part}, Line: 2, Lines: lines}})
		var pes ParseErrors
		if !errors.As(err, &pes) || len(pes) != 1 {
			t.Errorf("%q: Compile = %v, %v; want one problem", tc.part, rs, err)
			continue
		}
		got := pes[0].Error()
		if prefix := `f.yaml:7: rules[0].key[1]: key part ` + strconv.Quote(tc.part) + `: `; !strings.HasPrefix(got, prefix) || !strings.Contains(got, tc.want) {
			t.Errorf("%q: problem %q, want it to begin %q and name %q", tc.part, got, prefix, tc.want)
		}
		if rs != nil {
			t.Errorf("%q: compiled %v", tc.part, rs)
		}
	}
	for _, part := range []string{"query:api_key", "query:ids[]", "query:a.b", "query:a-b~c", "query:a:b", "query:a/b", "header:X-Api-Key", "cookie:session_id", "cookie:__Host-sid"} {
		if _, err := Compile("f.yaml", []Spec{{Name: "api", Rate: "1/s", Key: []string{"ip", part}}}); err != nil {
			t.Errorf("%q: %v; want it taken (a request carries it as written)", part, err)
		}
	}
}
