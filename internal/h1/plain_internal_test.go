package h1

import (
	"strings"
	"testing"
)

// plainValue, eight bytes at a time, answers as its definition does: no
// CR or LF anywhere, no space or tab at either end; for every length to
// 40 with a CR, LF, tab, other control byte, 0x7f or 0xff at each place.
func TestPlainValue(t *testing.T) {
	want := func(v string) bool {
		return !strings.ContainsAny(v, "\r\n") && v == strings.Trim(v, " \t")
	}
	for n := 0; n <= 40; n++ {
		base := []byte(strings.Repeat("a", n))
		if got := plainValue(string(base)); got != want(string(base)) {
			t.Errorf("plainValue(%q) = %v", base, got)
		}
		for i := range n {
			for _, c := range []byte{'\r', '\n', '\t', ' ', 0, 0x0b, 0x0d - 1, 0x0e, 0x7f, 0x80, 0xff} {
				v := []byte(string(base))
				v[i] = c
				if got := plainValue(string(v)); got != want(string(v)) {
					t.Errorf("plainValue(%q) = %v, want %v", v, got, !got)
				}
			}
		}
	}
}

// validValue, eight bytes at a time, answers as its definition does:
// visible ASCII, space, tab and bytes from 0x80; for every length to 40
// with each byte value at each place.
func TestValidValue(t *testing.T) {
	want := func(v []byte) bool {
		for _, c := range v {
			if c < ' ' && c != '\t' || c == 0x7f {
				return false
			}
		}
		return true
	}
	for n := 0; n <= 40; n++ {
		for _, fill := range []byte{'a', 0x80, 0xff, '\t', ' '} {
			base := []byte(strings.Repeat(string(rune(fill)), n))
			if fill >= 0x80 {
				base = []byte(strings.Repeat(string([]byte{fill}), n))
			}
			for i := range max(n, 1) {
				for c := range 256 {
					v := append([]byte(nil), base...)
					if n > 0 {
						v[i] = byte(c)
					}
					if got := validValue(string(v)); got != want(v) {
						t.Fatalf("validValue(%q) = %v, want %v", v, got, !got)
					}
				}
			}
		}
	}
}
