package doctest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// A YAMLBlock is a ```yaml (or ```yml) fenced block of a Markdown file.
type YAMLBlock struct {
	File string // relative to the repository's root: README.md, docs/config.md
	Line int    // of the opening fence
	Text string // the lines between the fences, without the fence's indentation
	// Sample is the name of the "<!-- sample: NAME" marker on the line
	// before the fence, if any.
	Sample string
}

// FirstKey returns the first top-level key of the block ("" if none):
// what it is (a Sluice config, an Envoy descriptor file, Envoy's config).
func (b YAMLBlock) FirstKey() string {
	for _, l := range strings.Split(b.Text, "\n") {
		if l == "" || l[0] == ' ' || l[0] == '#' || l[0] == '-' {
			continue
		}
		k, _, _ := strings.Cut(l, ":")
		return k
	}
	return ""
}

func (b YAMLBlock) String() string { return fmt.Sprintf("%s:%d", b.File, b.Line) }

var (
	fence  = regexp.MustCompile("^( *)```(yaml|yml)\\s*$")
	marker = regexp.MustCompile(`^\s*<!-- sample: (\S+)`)
)

// YAMLBlocks returns the YAML blocks of README.md and docs/*.md, in file
// order.
func YAMLBlocks(t testing.TB) []YAMLBlock {
	t.Helper()
	var out []YAMLBlock
	for _, b := range fencedBlocks(t, fence, "yaml") {
		var sample string
		if m := marker.FindStringSubmatch(b.before); m != nil {
			sample = m[1]
		}
		out = append(out, YAMLBlock{File: b.file, Line: b.line, Text: b.text, Sample: sample})
	}
	return out
}

// fencedBlock is a fenced block of a Markdown file.
type fencedBlock struct {
	file   string // relative to the repository's root
	line   int    // of the opening fence
	text   string // the lines between the fences, without the fence's indentation
	before string // the line before the opening fence ("" if none)
}

// fencedBlocks returns the blocks of README.md and docs/*.md, in file
// order, whose opening fence open matches, its first group the fence's
// indentation; lang names the blocks in the failure for one left open.
func fencedBlocks(t testing.TB, open *regexp.Regexp, lang string) []fencedBlock {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(Root(), "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{filepath.Join(Root(), "README.md")}, files...)
	var out []fencedBlock
	for _, f := range files {
		rel, _ := filepath.Rel(Root(), f)
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		for i := 0; i < len(lines); i++ {
			m := open.FindStringSubmatch(lines[i])
			if m == nil {
				continue
			}
			indent, start := m[1], i
			var text []string
			for i++; i < len(lines) && strings.TrimRight(lines[i], " ") != indent+"```"; i++ {
				text = append(text, strings.TrimPrefix(lines[i], indent))
			}
			if i == len(lines) {
				t.Fatalf("%s:%d: a ```%s block without its closing fence", rel, start+1, lang)
			}
			var before string
			if start > 0 {
				before = lines[start-1]
			}
			out = append(out, fencedBlock{file: rel, line: start + 1, text: strings.Join(text, "\n") + "\n", before: before})
		}
	}
	return out
}

// WriteConfig writes the Sluice config text into dir as sluice.yaml, with
// the files it names beside it, so that it loads as it would on a
// machine that has them: a certificate, key and CA for every tls block, a
// token for api.token_file, an Envoy descriptor file (or a directory of
// one) for every grpc.config entry, and the client's files of
// store.redis.tls and grpc.xds.tls. Absolute paths are moved under dir.
// It returns the config's path.
func WriteConfig(t testing.TB, dir, text string) string {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		t.Fatalf("not YAML: %v\n%s", err, text)
	}
	moved := map[string]bool{} // absolute paths moved under dir (a path named twice is moved once)
	local := func(p string) string {
		if filepath.IsAbs(p) && !moved[p] {
			moved[p] = true
			text = strings.ReplaceAll(text, p, filepath.Join(dir, p))
		}
		return filepath.Join(dir, p)
	}
	write := func(p string, data []byte) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cert, key := selfSigned(t)
	for _, block := range []string{"api", "proxy", "grpc"} {
		m, _ := doc[block].(map[string]any)
		if tls, ok := m["tls"].(map[string]any); ok {
			for field, data := range map[string][]byte{"cert": cert, "key": key, "client_ca": cert} {
				if p, ok := tls[field].(string); ok {
					write(local(p), data)
				}
			}
		}
		if p, ok := m["token_file"].(string); ok && block == "api" {
			write(local(p), []byte("s3cret-token\n"))
		}
		if block == "grpc" {
			paths, _ := m["config"].([]any)
			for i, p := range paths {
				s, _ := p.(string)
				file := local(s)
				if ext := filepath.Ext(s); ext != ".yaml" && ext != ".yml" {
					file = filepath.Join(file, "ratelimit.yaml")
				}
				write(file, fmt.Appendf(nil, "domain: docs-%d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10}\n", i))
			}
		}
	}
	grpc, _ := doc["grpc"].(map[string]any)
	xds, _ := grpc["xds"].(map[string]any)
	store, _ := doc["store"].(map[string]any)
	redis, _ := store["redis"].(map[string]any)
	for _, tls := range []any{redis["tls"], xds["tls"]} {
		tls, ok := tls.(map[string]any)
		if !ok {
			continue
		}
		for field, data := range map[string][]byte{"ca": cert, "cert": cert, "key": key} {
			if p, ok := tls[field].(string); ok {
				write(local(p), data)
			}
		}
	}
	path := filepath.Join(dir, "sluice.yaml")
	write(path, []byte(text))
	return path
}

// selfSigned returns a PEM certificate (its own CA) and its PEM key.
func selfSigned(t testing.TB) (cert, key []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "sluice docs"},
		DNSNames:              []string{"localhost"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}
