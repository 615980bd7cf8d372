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
