package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A descriptor file that grpc.config would have read twice (listed twice,
// or listed and in a listed directory, or two names of one directory) is
// refused at the entry that reads it again, naming the entry that read it
// first: it gave "domain already configured in dd/a.yaml" pointing at
// itself, and its likely cause, a typo for another file, leaves that
// file's domain unserved.
func TestGRPCConfigFileTwice(t *testing.T) {
	dir := t.TempDir()
	dd := filepath.Join(dir, "dd")
	if err := os.Mkdir(dd, 0o755); err != nil {
		t.Fatal(err)
	}
	mustWriteFile(t, filepath.Join(dd, "a.yaml"), "domain: a\n")
	mustWriteFile(t, filepath.Join(dd, "b.yaml"), "domain: b\n")
	mustWriteFile(t, filepath.Join(dir, "c.yaml"), "domain: c\n")
	if err := os.Symlink("dd", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	ee := filepath.Join(dir, "ee")
	if err := os.Mkdir(ee, 0o755); err != nil {
		t.Fatal(err)
	}
	mustWriteFile(t, filepath.Join(ee, "x.yaml"), "domain: x\n")
	if err := os.Symlink("x.yaml", filepath.Join(ee, "y.yaml")); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "sluice.yaml")
	for _, tc := range []struct {
		list string
		want string // "" for none
	}{
		{"[dd/a.yaml, c.yaml]", ""},
		{"[dd, c.yaml]", ""},
		{"[dd/a.yaml, dd/a.yaml]", "sluice.yaml:5: grpc.config[1]: " + dd + "/a.yaml is read already, by grpc.config[0]"},
		{"[dd/a.yaml, ./dd/../dd/a.yaml]", "sluice.yaml:5: grpc.config[1]: " + dd + "/a.yaml is read already, by grpc.config[0]"},
		{"[dd, dd/b.yaml]", "sluice.yaml:5: grpc.config[1]: " + dd + "/b.yaml is read already, by grpc.config[0] (" + dd + ")"},
		{"[dd/b.yaml, dd]", "sluice.yaml:5: grpc.config[1]: " + dd + " reads " + dd + "/b.yaml, which grpc.config[0] reads already"},
		{"[dd, link]", "sluice.yaml:5: grpc.config[1]: " + dir + "/link is read already, by grpc.config[0] (" + dd + ")"},
		{"[ee]", "sluice.yaml:4: grpc.config[0]: " + ee + " holds " + ee + "/x.yaml and " + ee + "/y.yaml, one file under two names"},
	} {
		y := "grpc:\n  listen: 127.0.0.1:0\n  config:\n    " + strings.ReplaceAll(tc.list, ", ", "\n    - ")
		y = strings.Replace(y, "config:\n    [", "config:\n    - ", 1)
		y = strings.TrimSuffix(y, "]") + "\n"
		mustWriteFile(t, cfg, y)
		_, err := Load(cfg)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("grpc.config: %s: %v, want it read", tc.list, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("grpc.config: %s: %v\nwant %q", tc.list, err, tc.want)
		case tc.want != "" && !strings.Contains(err.Error(), "list each descriptor file once"):
			t.Errorf("grpc.config: %s: %v\nwant it to say: list each descriptor file once", tc.list, err)
		}
	}
}
