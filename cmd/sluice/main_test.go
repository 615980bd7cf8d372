package main

import (
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
		{args: []string{"-h"}, code: 0, stdout: "check-config FILE"},
		{args: []string{"version"}, code: 0, stdout: "sluice " + version},
		{args: []string{"--version"}, code: 0, stdout: "sluice " + version},
		{args: []string{"version", "extra"}, code: 2, stderr: `sluice version: unexpected argument "extra"`},
		{args: []string{"help", "extra"}, code: 2, stderr: `sluice: unknown command "extra"`},
		{args: []string{"help", "serve"}, code: 0, stderr: "usage: sluice serve"},
		{args: []string{"help", "check-config"}, code: 0, stderr: "usage: sluice check-config FILE"},
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
