package main

import (
	"bytes"
	"os"
	"path/filepath"
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
			t.Errorf("%s: sluice check-config refuses the block (exit %d):\n%s\nthe block:\n%s", b, code, stderr.String(), b.Text)
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
