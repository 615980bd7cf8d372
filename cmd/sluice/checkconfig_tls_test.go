package main

import (
	"bytes"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// check-config warns, as serve does at startup, about a certificate that
// loads but that clients will refuse: not valid yet, or expired. The config
// is still valid (exit 0): serve starts with it.
func TestCheckConfigCertificateValidity(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	for _, tc := range []struct {
		name string
		edit func(*x509.Certificate)
		want string // in the warning; "" for none
	}{
		{"valid", func(*x509.Certificate) {}, ""},
		{"early", func(c *x509.Certificate) { c.NotBefore = time.Now().Add(48 * time.Hour) }, "is not valid until"},
		{"expired", func(c *x509.Certificate) {
			c.NotBefore, c.NotAfter = time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour)
		}, "expired on"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := ca.ServerWith(t, tc.name, tc.edit)
			file := filepath.Join(t.TempDir(), "sluice.yaml")
			y := "listen: 127.0.0.1:0\napi:\n  tls:\n    cert: " + p.CertFile + "\n    key: " + p.KeyFile + "\nrules:\n  - name: a\n    rate: 1/s\n"
			if err := os.WriteFile(file, []byte(y), 0o600); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			code := run(t.Context(), []string{"check-config", file}, nil, &stdout, &stderr)
			if code != 0 || !strings.HasPrefix(stdout.String(), file+": ok: ") {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 0 and ok", code, stdout.String(), stderr.String())
			}
			switch {
			case tc.want == "" && stderr.Len() != 0:
				t.Errorf("stderr %q, want nothing", stderr.String())
			case tc.want != "" && (!strings.Contains(stderr.String(), file+":4: api.tls.cert: warning: ") || !strings.Contains(stderr.String(), tc.want) || strings.Count(stderr.String(), "\n") != 1):
				t.Errorf("stderr %q, want one line %q… naming %q", stderr.String(), file+":4: api.tls.cert: warning: ", tc.want)
			}
		})
	}
}
