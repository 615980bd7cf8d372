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
