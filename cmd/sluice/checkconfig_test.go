package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckConfig runs `sluice check-config` on every fixture of
// internal/config/testdata/config and compares its standard error with the
// fixture's golden file (the problems, one per line), or, for the ok-
// fixtures, checks the exit status and the "FILE: ok" line.
func TestCheckConfig(t *testing.T) {
	t.Chdir("../../internal/config")
	t.Setenv("SLUICE_TEST_REDIS_PASSWORD", "s3cret")
	t.Setenv("SLUICE_TEST_PORT", "")
	for _, v := range []string{"SLUICE_TEST_UNSET_HOST", "SLUICE_TEST_UNSET_PASSWORD"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	files, err := filepath.Glob("testdata/config/*.yaml")
	if err != nil || len(files) < 20 {
		t.Fatalf("fixtures: %d, %v", len(files), err)
	}
	for _, file := range files {
		var stdout, stderr bytes.Buffer
		code := run(t.Context(), []string{"check-config", file}, nil, &stdout, &stderr)
		// check-config also reports what serve refuses to start with
		// (parsed, not enforced yet); a fixture whose answer differs from
		// config.Parse's says so in NAME.check-config.golden.
		golden, err := os.ReadFile(strings.TrimSuffix(file, ".yaml") + ".check-config.golden")
		if os.IsNotExist(err) {
			golden, err = os.ReadFile(strings.TrimSuffix(file, ".yaml") + ".golden")
		}
		if err != nil {
			t.Fatal(err)
		}
		if string(golden) == "ok\n" {
			if code != 0 || stderr.Len() != 0 || !strings.HasPrefix(stdout.String(), file+": ok: ") || strings.Count(stdout.String(), "\n") != 1 {
				t.Errorf("check-config %s = exit %d, stdout %q, stderr %q; want 0, one line %q…", file, code, stdout.String(), stderr.String(), file+": ok: ")
			}
			continue
		}
		if code != 1 || stdout.Len() != 0 || stderr.String() != string(golden) {
			t.Errorf("check-config %s = exit %d, stdout %q, stderr:\n%s\nwant exit 1 and:\n%s", file, code, stdout.String(), stderr.String(), golden)
		}
	}
}

func TestCheckConfigUsage(t *testing.T) {
	// Each names the problem, as serve and simulate do, then shows the usage.
	for _, c := range []struct {
		args    []string
		problem string
	}{
		{[]string{"check-config"}, "sluice check-config: no FILE to check"},
		{[]string{"check-config", "a", "b"}, `sluice check-config: unexpected argument "b"`},
		{[]string{"check-config", "-bogus"}, "flag provided but not defined: -bogus"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(t.Context(), c.args, nil, &stdout, &stderr); code != 2 || !strings.HasPrefix(stderr.String(), c.problem+"\n") || !strings.Contains(stderr.String(), "usage: sluice check-config [-listen ADDR] [-proxy-listen ADDR] [-grpc-listen ADDR] FILE") {
			t.Errorf("sluice %v = exit %d, stderr %q; want 2, %q and the usage", c.args, code, stderr.String(), c.problem)
		}
	}
	var stdout, stderr bytes.Buffer
	missing := filepath.Join(t.TempDir(), "none.yaml")
	if code := run(t.Context(), []string{"check-config", missing}, nil, &stdout, &stderr); code != 1 || !strings.HasPrefix(stderr.String(), missing+": cannot read config") {
		t.Errorf("check-config (missing file) = exit %d, stderr %q", code, stderr.String())
	}
}

func TestCheckConfigExample(t *testing.T) {
	// The summary line of a config with a proxy.
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	data := "proxy: {listen: 127.0.0.1:8000, upstream: http://127.0.0.1:9000}\nrules:\n  - {name: login, rate: 5/m}\n  - {name: api, rate: 100/s}\n"
	if err := os.WriteFile(file, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"check-config", file}, nil, &stdout, &stderr)
	want := file + ": ok: 2 rules (login, api); store memory; api 127.0.0.1:8080; proxy 127.0.0.1:8000 -> http://127.0.0.1:9000\n"
	if code != 0 || stdout.String() != want {
		t.Errorf("check-config = exit %d, stdout %q, stderr %q; want 0, %q", code, stdout.String(), stderr.String(), want)
	}
}

// TestCheckConfigDescriptors: check-config reads the Envoy descriptor
// files too, reporting their problems with file and line.
func TestCheckConfigDescriptors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rl := write("rl.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")
	cfg := write("sluice.yaml", "grpc:\n  listen: 127.0.0.1:8081\n  config: [rl.yaml]\n")
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"check-config", cfg}, nil, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "grpc 127.0.0.1:8081 (1 descriptor file, 1 domain, 1 limit)") {
		t.Errorf("check-config with a good descriptor file = exit %d, %q %q", code, stdout.String(), stderr.String())
	}
	write("rl.yaml", "domain: d\ndescriptors:\n  - key: k\n    shadow: true\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")
	stdout.Reset()
	stderr.Reset()
	if code := run(t.Context(), []string{"check-config", cfg}, nil, &stdout, &stderr); code != 1 || !strings.HasPrefix(stderr.String(), rl+":4: descriptors[0].shadow: unknown key") {
		t.Errorf("check-config with a bad descriptor file = exit %d, stderr %q; want 1 naming %s:4", code, stderr.String(), rl)
	}
	// A listed directory's entries that are not read, each of which may
	// hold a domain the reference service served, are warned of.
	if err := os.MkdirAll(filepath.Join(dir, "conf", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	write("conf/rl.yaml", "domain: d\n")
	write("conf/other.conf", "domain: o\n")
	cfg = write("sluice.yaml", "grpc:\n  listen: 127.0.0.1:8081\n  config: [conf]\n")
	stdout.Reset()
	stderr.Reset()
	code := run(t.Context(), []string{"check-config", cfg}, nil, &stdout, &stderr)
	conf := filepath.Join(dir, "conf")
	want := "warning: " + filepath.Join(conf, "other.conf") + ": not read: not a *.yaml or *.yml file (the reference service reads every file of its directory: rename it if it holds a domain)\n" +
		"warning: " + filepath.Join(conf, "sub") + ": not read: a subdirectory (the reference service reads those too: list it in grpc.config if it holds descriptor files)\n"
	if code != 0 || stderr.String() != want || !strings.Contains(stdout.String(), "(1 descriptor file, 1 domain, 0 limits)") {
		t.Errorf("check-config with a directory holding other entries = exit %d, stdout %q, stderr %q; want 0 and stderr %q", code, stdout.String(), stderr.String(), want)
	}
	// A service in shadow mode enforces nothing: the summary says so.
	write("rl.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")
	cfg = write("sluice.yaml", "grpc:\n  listen: 127.0.0.1:8081\n  config: [rl.yaml]\n  shadow_mode: true\n")
	stdout.Reset()
	stderr.Reset()
	if code := run(t.Context(), []string{"check-config", cfg}, nil, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "grpc 127.0.0.1:8081 (1 descriptor file, 1 domain, 1 limit; shadow mode: no limit denies)") {
		t.Errorf("check-config with grpc.shadow_mode = exit %d, %q %q; want the summary to say no limit denies", code, stdout.String(), stderr.String())
	}
}

// TestCheckConfigRedisDB: the summary names the Redis database when it
// is not 0, the default, and a Sentinel's master set.
func TestCheckConfigRedisDB(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	for _, c := range []struct{ redis, want string }{
		{"{addrs: [127.0.0.1:6379], db: 2}", "; store redis (127.0.0.1:6379, single, db 2, on_error allow); "},
		{"{addrs: [127.0.0.1:6379]}", "; store redis (127.0.0.1:6379, single, on_error allow); "},
		{"{addrs: [127.0.0.1:26379], sentinel: mymaster, db: 1}", "; store redis (127.0.0.1:26379, sentinel mymaster, db 1, on_error allow); "},
	} {
		if err := os.WriteFile(cfg, []byte("store:\n  type: redis\n  redis: "+c.redis+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		if code := run(t.Context(), []string{"check-config", cfg}, nil, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), c.want) {
			t.Errorf("check-config with redis %s = exit %d, %q %q; want a summary with %q", c.redis, code, stdout.String(), stderr.String(), c.want)
		}
	}
}

// TestCheckConfigListsEveryStage: a config that parses but that serve would
// refuse for several reasons (a TLS file that does not load, a broken
// descriptor file) gets every problem listed
// in one run, each with file, line and key, not only those of the first
// check that failed: fixing them one run at a time is what check-config
// is there to spare.
func TestCheckConfigListsEveryStage(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rl := write("rl.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 5}\n")
	write("bad.pem", "not a certificate\n")
	cfg := write("sluice.yaml", `listen: 127.0.0.1:0
api:
  tls: {cert: bad.pem, key: bad.pem}
grpc:
  listen: 127.0.0.1:0
  config: [rl.yaml]
store:
  type: redis
  redis: {addrs: [127.0.0.1:1]}
rules:
  - {name: a, rate: 1/s}
`)
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"check-config", cfg}, nil, &stdout, &stderr)
	for _, want := range []string{
		cfg + ":3: api.tls.cert: ",
		rl + ":4: descriptors[0].rate_limit.unit: ",
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("check-config: stderr lacks a line %q…:\n%s", want, stderr.String())
		}
	}
	if code != 1 || stdout.Len() != 0 {
		t.Errorf("check-config = exit %d, stdout %q; want 1 and nothing", code, stdout.String())
	}
}
