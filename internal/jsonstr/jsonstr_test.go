package jsonstr

import (
	"encoding/json"
	"testing"
)

func FuzzAppend(f *testing.F) {
	for _, s := range []string{"", "plain", `q"b\s`, "<a>&", "\x00\x1f\n\t", "é\u2028\u2029", "\xff\xfe", "a\xc3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := Append(nil, s)
		want, _ := json.Marshal(s)
		var gotS, wantS string
		if err := json.Unmarshal(got, &gotS); err != nil {
			t.Fatalf("Append(%q) = %s: not a JSON string: %v", s, got, err)
		}
		json.Unmarshal(want, &wantS)
		if gotS != wantS {
			t.Errorf("Append(%q) = %s decodes to %q, want (as encoding/json's %s) %q", s, got, gotS, want, wantS)
		}
		for _, c := range got {
			if c == '<' || c == '>' || c == '&' {
				t.Errorf("Append(%q) = %s: unescaped %q", s, got, c)
			}
		}
	})
}
