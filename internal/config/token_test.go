package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTokenFileOneLine: the token is what no Authorization header can
// fail to carry. White space around it goes (a file written with echo
// ends in a newline); a line break or another control character inside
// it (a second line, a comment, a CRLF pasted in the middle) is refused,
// naming the file at api.token_file: no request could ever carry such a
// token, so every client would be refused 401 without a word.
func TestTokenFileOneLine(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		file, want string // want "": refused
	}{
		{"tok\n", "tok"},
		{"  tok \r\n", "tok"},
		{"tok en\n", "tok en"},
		{"tök\n", "tök"},
		{"tok\nsecond\n", ""},
		{"# the API token\ntok\n", ""},
		{"tok\r\nen", ""},
		{"to\x00k", ""},
		{"to\x7fk", ""},
	} {
		path := filepath.Join(dir, "token")
		if err := os.WriteFile(path, []byte(c.file), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := ReadToken(path)
		switch {
		case c.want != "" && (err != nil || string(got) != c.want):
			t.Errorf("ReadToken(%q) = %q, %v; want %q", c.file, got, err, c.want)
		case c.want == "" && err == nil:
			t.Errorf("ReadToken(%q) = %q; want an error: no header can carry it", c.file, got)
		case c.want == "" && !strings.Contains(err.Error(), "control character"):
			t.Errorf("ReadToken(%q): %v; want it to say the token holds a control character", c.file, err)
		}
	}
	mustWriteFile(t, filepath.Join(dir, "token"), "tok\nsecond\n")
	cfgPath := filepath.Join(dir, "sluice.yaml")
	mustWriteFile(t, cfgPath, "api:\n  token_file: token\n")
	if _, err := Load(cfgPath); err == nil || !strings.Contains(err.Error(), "api.token_file") || !strings.Contains(err.Error(), "control character") {
		t.Errorf("Load with a two-line token file = %v, want a problem at api.token_file", err)
	}
}

func mustWriteFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}
