package main

import (
	"runtime/debug"
	"strings"
	"testing"
)

// TestRunDispatch: the command line's own answers. Usage errors exit 2
// with the problem named on standard error; help and version exit 0 on
// standard output; `help CMD` is `CMD -h` (a flag set's help goes to
// standard error).
func TestRunDispatch(t *testing.T) {
	for _, c := range []struct {
		args   []string
		code   int
		stdout string // a part of it
		stderr string // a part of it
	}{
		{args: nil, code: 2, stderr: "usage: sluice <command>"},
		{args: []string{"bogus"}, code: 2, stderr: `sluice: unknown command "bogus"`},
		{args: []string{"help"}, code: 0, stdout: "usage: sluice <command>"},
		{args: []string{"-h"}, code: 0, stdout: "check-config [-listen ADDR] [-proxy-listen ADDR] [-grpc-listen ADDR] FILE"},
		{args: []string{"version"}, code: 0, stdout: "sluice " + version},
		{args: []string{"--version"}, code: 0, stdout: "sluice " + version},
		{args: []string{"version", "extra"}, code: 2, stderr: `sluice version: unexpected argument "extra"`},
		{args: []string{"help", "extra"}, code: 2, stderr: `sluice: unknown command "extra"`},
		{args: []string{"help", "serve"}, code: 0, stderr: "usage: sluice serve"},
		{args: []string{"help", "check-config"}, code: 0, stderr: "usage: sluice check-config [-listen ADDR] [-proxy-listen ADDR] [-grpc-listen ADDR] FILE"},
		{args: []string{"help", "simulate"}, code: 0, stderr: "usage: sluice simulate"},
		{args: []string{"help", "serve", "x"}, code: 2, stderr: `sluice help: unexpected argument "x"`},
	} {
		var stdout, stderr strings.Builder
		code := run(t.Context(), c.args, nil, &stdout, &stderr)
		if code != c.code || !strings.Contains(stdout.String(), c.stdout) || !strings.Contains(stderr.String(), c.stderr) {
			t.Errorf("sluice %q: exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
				c.args, code, stdout.String(), stderr.String(), c.code, c.stdout, c.stderr)
		}
		if c.code == 0 && c.stderr == "" && stderr.Len() > 0 {
			t.Errorf("sluice %q: stderr %q, want nothing", c.args, stderr.String())
		}
	}
}

// TestVersionString: `sluice version` names the build: the version set
// with -ldflags, else the module version `go install …@v1.2.3` records,
// else the commit a build from a checkout records.
func TestVersionString(t *testing.T) {
	build := func(mod string, settings ...string) *debug.BuildInfo {
		bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/sluicehq/sluice", Version: mod}}
		for i := 0; i+1 < len(settings); i += 2 {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return bi
	}
	for _, c := range []struct {
		ldflags string
		info    *debug.BuildInfo
		want    string
	}{
		{"1.4.0", build("v1.3.0"), "1.4.0"},
		{"dev", build("v1.3.0"), "v1.3.0"},
		{"dev", build("v1.3.1-0.20261127120000-abcdef123456"), "v1.3.1-0.20261127120000-abcdef123456"},
		{"dev", build("(devel)", "vcs.revision", "0123456789abcdef0123", "vcs.modified", "false"), "dev (0123456789ab)"},
		{"dev", build("(devel)", "vcs.revision", "0123456789abcdef0123", "vcs.modified", "true"), "dev (0123456789ab, modified)"},
		{"dev", build("(devel)"), "dev"},
		{"dev", build(""), "dev"},
		{"dev", nil, "dev"},
	} {
		if got := versionString(c.ldflags, c.info); got != c.want {
			t.Errorf("versionString(%q, %+v) = %q, want %q", c.ldflags, c.info, got, c.want)
		}
	}
}
