package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/doctest"
)

// TestDocYAMLBlocks: every ```yaml block of README.md and docs/*.md is
// what its page says it is, and `sluice check-config` accepts it as it
// stands, so that a reader who copies one gets a working file: a Sluice
// config (with the certificates, tokens and descriptor files it names
// made beside it), or an Envoy descriptor file (checked through a config
// that lists it). Envoy's own config (http_filters, rate_limits) is
// Envoy's to check, and is left out.
func TestDocYAMLBlocks(t *testing.T) {
	t.Setenv("REDIS_PASSWORD", "docs-password")
	blocks := doctest.YAMLBlocks(t)
	if len(blocks) < 10 {
		t.Fatalf("found %d yaml blocks in README.md and docs/*.md; the extraction is broken", len(blocks))
	}
	var configs, descriptorFiles int
	for _, b := range blocks {
		dir := t.TempDir()
		var path string
		if b.Sample == "broken-config" {
			continue // wrong on purpose: TestDocCheckConfigSample
		}
		switch b.FirstKey() {
		case "http_filters", "rate_limits": // Envoy's config, not Sluice's
			continue
		case "domain": // an Envoy descriptor file, as grpc.config reads it
			descriptorFiles++
			path = doctest.WriteConfig(t, dir, "grpc:\n  listen: 127.0.0.1:8081\n  config: [ratelimit.yaml]\nstore:\n  type: redis\n  redis: {addrs: [127.0.0.1:6379]}\n")
			if err := os.WriteFile(filepath.Join(dir, "ratelimit.yaml"), []byte(b.Text), 0o644); err != nil {
				t.Fatal(err) // WriteConfig made a placeholder there
			}
		default:
			configs++
			path = doctest.WriteConfig(t, dir, b.Text)
		}
		var stdout, stderr bytes.Buffer
		if code := run(t.Context(), []string{"check-config", path}, nil, &stdout, &stderr); code != 0 {
			t.Errorf("%s: sluice check-config refuses the block (exit %d; line N of the config is line %d+N of the page):\n%s\nthe block:\n%s", b, code, b.Line, stderr.String(), b.Text)
		}
	}
	if configs < 8 || descriptorFiles < 2 {
		t.Errorf("checked %d configs and %d descriptor files; the blocks' kinds are misread", configs, descriptorFiles)
	}
}

// TestDocAnnotatedConfigsAgree: the README's complete, annotated config is
// docs/config.md's, word for word, so the two cannot drift apart.
func TestDocAnnotatedConfigsAgree(t *testing.T) {
	readme := doctest.Block(t, "README.md", "config-annotated")
	page := doctest.Block(t, "docs/config.md", "config-annotated")
	if readme != page {
		t.Errorf("README.md's annotated config differs from docs/config.md's; make them the same (docs/config.md's is the reference, internal/config/docs_test.go checks its defaults)")
	}
}

// TestDocCheckConfigSample: what docs/config.md shows check-config saying
// of the quick start's config and of its broken.yaml is what it says.
func TestDocCheckConfigSample(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for name, sample := range map[string]string{"sluice.yaml": "daemon-config", "broken.yaml": "broken-config"} {
		page := "docs/config.md"
		if sample == "daemon-config" {
			page = "docs/daemon.md"
		}
		if err := os.WriteFile(name, []byte(doctest.Block(t, page, sample)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("REDIS_PASSWORD", "")
	os.Unsetenv("REDIS_PASSWORD")
	var out strings.Builder
	for _, file := range []string{"sluice.yaml", "broken.yaml"} {
		var stdout, stderr bytes.Buffer
		code := run(t.Context(), []string{"check-config", file}, nil, &stdout, &stderr)
		out.WriteString("$ sluice check-config " + file + "\n" + stdout.String() + stderr.String())
		if file == "broken.yaml" {
			out.WriteString("$ echo $?\n" + strconv.Itoa(code) + "\n")
		} else if code != 0 {
			t.Errorf("check-config %s: exit %d, want 0", file, code)
		}
	}
	doctest.Check(t, "docs/config.md", "check-config", out.String())
}

// TestDocCheckConfigEnvoy: docs/envoy.md's check-config sample is what
// check-config says of the page's config with the page's two descriptor
// files in its grpc.config directory.
func TestDocCheckConfigEnvoy(t *testing.T) {
	var conf string
	var descs []string
	for _, b := range doctest.YAMLBlocks(t) {
		if b.File != "docs/envoy.md" {
			continue
		}
		switch {
		case b.FirstKey() == "domain":
			descs = append(descs, b.Text)
		case conf == "" && b.FirstKey() == "listen":
			conf = b.Text
		}
	}
	if conf == "" || len(descs) != 2 {
		t.Fatalf("docs/envoy.md: want its first config and two descriptor files, found %d", len(descs))
	}
	dir := t.TempDir()
	t.Chdir(dir)
	doctest.WriteConfig(t, dir, conf) // its /etc/ratelimit/config moves under dir
	rl := filepath.Join(dir, "etc", "ratelimit", "config")
	if err := os.RemoveAll(rl); err != nil {
		t.Fatal(err)
	}
	for i, d := range descs {
		if err := os.MkdirAll(rl, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(rl, strconv.Itoa(i)+".yaml"), []byte(d), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"check-config", "sluice.yaml"}, nil, &stdout, &stderr); code != 0 {
		t.Fatalf("check-config: exit %d: %s", code, stderr.String())
	}
	doctest.Check(t, "docs/envoy.md", "envoy-check-config", "$ sluice check-config sluice.yaml\n"+stdout.String())
}

// TestDocCheckConfigOverrideClash: the README's example of check-config
// refusing an override that clashes with a listener of the config (the
// quick start's sluice.yaml, given -proxy-listen on its listen's address)
// is what check-config says, up to the "(…)" that stands for the rest.
func TestDocCheckConfigOverrideClash(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(doctest.Root(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(readme), "\n", " ")
	const start = "`sluice.yaml: "
	var quoted string
	for rest := text; ; {
		i := strings.Index(rest, start)
		if i < 0 {
			break
		}
		span, _, _ := strings.Cut(rest[i+1:], "`")
		if strings.Contains(span, "-proxy-listen") && strings.Contains(span, "would both listen on") {
			quoted = span
			break
		}
		rest = rest[i+len(start):]
	}
	if quoted == "" {
		t.Fatal("README.md: no quoted check-config message of a -proxy-listen clash (`sluice.yaml: … would both listen on …`)")
	}
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.WriteFile("sluice.yaml", []byte(doctest.Block(t, "docs/daemon.md", "daemon-config")), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"check-config", "-proxy-listen", "localhost:8080", "sluice.yaml"}, nil, &stdout, &stderr); code != 1 {
		t.Fatalf("check-config -proxy-listen localhost:8080 sluice.yaml: exit %d, want 1; stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
	got := strings.TrimSuffix(stderr.String(), "\n")
	want, elided := strings.CutSuffix(quoted, " (…)")
	if elided && !strings.HasPrefix(got, want+" (") || !elided && got != want {
		t.Errorf("README.md quotes check-config as\n\t%s\nit says\n\t%s", quoted, got)
	}
}
