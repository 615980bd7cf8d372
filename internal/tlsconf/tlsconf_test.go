package tlsconf_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/tlsconf"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// handshake runs a TLS handshake over a real loopback connection between
// a server with cfg and a client with ccfg; it returns the server's error.
func handshake(t *testing.T, cfg, ccfg *tls.Config) (server, client error) {
	t.Helper()
	server, client, _ = resume(t, cfg, ccfg)
	return server, client
}

// resume is handshake, also reporting whether the client resumed a
// session.
func resume(t *testing.T, cfg, ccfg *tls.Config) (server, client error, resumed bool) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		sc := tls.Server(c, cfg)
		if err := sc.Handshake(); err != nil {
			done <- err
			return
		}
		b := make([]byte, 1)
		if _, err := sc.Read(b); err == nil {
			sc.Write(b) // echo: the client's read then succeeds
		}
		done <- nil
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), ccfg)
	if err == nil {
		// TLS 1.3: the client learns of a refused certificate on its
		// first read.
		c.Write([]byte("x"))
		_, err = c.Read(make([]byte, 1))
		resumed = c.ConnectionState().DidResume
		c.Close()
	}
	return <-done, err, resumed
}

func TestMutualTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "clients")
	other := tlstest.NewCA(t, "other")
	srv := ca.Server(t)
	envoy := ca.Client(t, "envoy", []string{"envoy.mesh"})
	spiffe := ca.Client(t, "spiffe", nil, "spiffe://mesh/ns/edge/sa/envoy")
	stranger := ca.Client(t, "stranger", []string{"stranger.mesh"})
	forged := other.Client(t, "forged", []string{"envoy.mesh"})

	cfg, err := tlsconf.Load(tlsconf.Options{Cert: srv.CertFile, Key: srv.KeyFile, ClientCA: ca.File,
		ClientSANs: []string{"envoy.mesh", "spiffe://mesh/ns/edge/sa/envoy"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		certs []tls.Certificate
		ok    bool
	}{
		{"allowed DNS SAN", []tls.Certificate{envoy.TLS}, true},
		{"allowed URI SAN", []tls.Certificate{spiffe.TLS}, true},
		{"no certificate", nil, false},
		{"a SAN not allowed", []tls.Certificate{stranger.TLS}, false},
		{"signed by another CA", []tls.Certificate{forged.TLS}, false},
	} {
		serr, cerr := handshake(t, cfg, ca.ClientConfig(c.certs...))
		if c.ok && (serr != nil || cerr != nil) {
			t.Errorf("%s: refused (server %v, client %v), want accepted", c.name, serr, cerr)
		}
		if !c.ok && (serr == nil || cerr == nil) {
			t.Errorf("%s: accepted (server %v, client %v), want refused", c.name, serr, cerr)
		}
		if c.name == "a SAN not allowed" && !errors.Is(serr, tlsconf.ErrSANNotAllowed) {
			t.Errorf("%s: server error %v, want ErrSANNotAllowed", c.name, serr)
		}
	}

	// TLS without a client CA accepts any client, with or without a
	// certificate.
	plain, err := tlsconf.Load(tlsconf.Options{Cert: srv.CertFile, Key: srv.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	if serr, cerr := handshake(t, plain, ca.ClientConfig()); serr != nil || cerr != nil {
		t.Errorf("TLS without client_ca: %v / %v, want accepted", serr, cerr)
	}
}

func TestLoadErrors(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	srv := ca.Server(t)
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.pem")
	os.WriteFile(junk, []byte("not a certificate\n"), 0o600)
	missing := filepath.Join(dir, "missing.pem")
	for _, c := range []struct {
		name  string
		o     tlsconf.Options
		field string
		path  string
		msg   string
	}{
		{"missing cert", tlsconf.Options{Cert: missing, Key: srv.KeyFile}, "cert", missing, "no such file"},
		{"missing key", tlsconf.Options{Cert: srv.CertFile, Key: missing}, "key", missing, "no such file"},
		{"junk cert", tlsconf.Options{Cert: junk, Key: srv.KeyFile}, "cert", junk, "no PEM certificate"},
		{"key of another cert", tlsconf.Options{Cert: srv.CertFile, Key: ca.Client(t, "c", nil).KeyFile}, "key", "", "does not match"},
		{"junk client CA", tlsconf.Options{Cert: srv.CertFile, Key: srv.KeyFile, ClientCA: junk}, "client_ca", junk, "no PEM certificate"},
		{"missing client CA", tlsconf.Options{Cert: srv.CertFile, Key: srv.KeyFile, ClientCA: missing}, "client_ca", missing, "no such file"},
	} {
		_, err := tlsconf.Load(c.o)
		var te *tlsconf.Error
		if !errors.As(err, &te) || te.Field != c.field || (c.path != "" && te.Path != c.path) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: Load = %v, want an error on %s (%s) saying %q", c.name, err, c.field, c.path, c.msg)
		}
	}
}

// TestAllowedNames: client_sans matches a DNS name whatever its case (DNS
// names are case-insensitive, RFC 4343: a CA may issue GW.Example for
// gw.example), an IP address in any of its spellings, a URI exactly, and
// an email's domain in any case but its local part exactly; a name of one
// kind never matches a SAN of another.
func TestAllowedNames(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	cert := ca.ClientWith(t, "c", func(c *x509.Certificate) {
		c.DNSNames = []string{"GW.Example"}
		c.IPAddresses = []net.IP{net.ParseIP("10.0.0.7"), net.ParseIP("2001:db8::1")}
		c.URIs = []*url.URL{{Scheme: "spiffe", Host: "mesh", Path: "/ns/Edge/sa/envoy"}}
		c.EmailAddresses = []string{"ops@example.com"}
	}).TLS.Leaf
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"gw.example", true},
		{"GW.EXAMPLE", true},
		{"gw.example.", false},
		{"10.0.0.7", true},
		{"::ffff:10.0.0.7", true},
		{"2001:DB8::1", true},
		{"2001:db8:0:0::1", true},
		{"2001:db8::2", false},
		{"spiffe://mesh/ns/Edge/sa/envoy", true},
		{"spiffe://mesh/ns/edge/sa/envoy", false},
		{"ops@example.com", true},
		// An email's domain in any case (RFC 5321 section 2.4, RFC 5280
		// section 7.5), its local part exactly (case may matter there).
		{"ops@EXAMPLE.com", true},
		{"ops@Example.Com", true},
		{"Ops@example.com", false},
		{"OPS@EXAMPLE.COM", false},
		{"ops@example.org", false},
		{"ops@", false},
		{"ops", false},
		{"mesh", false},
	} {
		if got := tlsconf.Allowed(cert, []string{c.name}); got != c.ok {
			t.Errorf("Allowed(cert with GW.Example, 10.0.0.7, 2001:db8::1, spiffe://mesh/ns/Edge/sa/envoy, ops@example.com, %q) = %v, want %v", c.name, got, c.ok)
		}
	}
}

// TestAllowedNamesKindByKind: a name of client_sans is of one kind, by its
// form (an IP address, a URI with its scheme, an email address, else a DNS
// name), and matches SANs of that kind only: a DNS SAN that reads
// "10.0.0.7" or "ops@example.com", or a URI SAN "gw.example" (no scheme),
// which a CA checking one kind of name may let a client choose, is not
// the IP address, mailbox or DNS name allowed. (A DNS SAN
// "Ops@example.com" matched "ops@example.com" in any case, as DNS names
// do, past the exact local part.)
func TestAllowedNamesKindByKind(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	cert := ca.ClientWith(t, "c", func(c *x509.Certificate) {
		c.DNSNames = []string{"10.0.0.7", "Ops@example.com", "spiffe://mesh/ns/a"}
		c.URIs = []*url.URL{{Path: "gw.example"}, {Path: "ops@example.org"}}
		c.EmailAddresses = []string{"gw@example.net"}
	}).TLS.Leaf
	for _, name := range []string{"10.0.0.7", "ops@example.com", "spiffe://mesh/ns/a", "gw.example", "ops@example.org"} {
		if tlsconf.Allowed(cert, []string{name}) {
			t.Errorf("Allowed(cert with DNS SANs 10.0.0.7, Ops@example.com, spiffe://mesh/ns/a, URI SANs gw.example, ops@example.org, %q) = true, want false: no SAN of its kind", name)
		}
	}
}

// TestClientCertRefused: a client certificate that expired, or is not yet
// valid, or is a server certificate, is refused even with an allowed name.
func TestClientCertRefused(t *testing.T) {
	ca := tlstest.NewCA(t, "clients")
	srv := ca.Server(t)
	cfg, err := tlsconf.Load(tlsconf.Options{Cert: srv.CertFile, Key: srv.KeyFile, ClientCA: ca.File, ClientSANs: []string{"gw.test"}})
	if err != nil {
		t.Fatal(err)
	}
	valid := func(from, to time.Duration) func(*x509.Certificate) {
		return func(c *x509.Certificate) {
			c.DNSNames = []string{"gw.test"}
			c.NotBefore, c.NotAfter = time.Now().Add(from), time.Now().Add(to)
		}
	}
	for name, p := range map[string]tlstest.Pair{
		"expired":       ca.ClientWith(t, "expired", valid(-48*time.Hour, -time.Hour)),
		"not yet valid": ca.ClientWith(t, "early", valid(time.Hour, 48*time.Hour)),
		"server-auth only": ca.ClientWith(t, "server-only", func(c *x509.Certificate) {
			valid(-time.Hour, time.Hour)(c)
			c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		}),
	} {
		if serr, cerr := handshake(t, cfg, ca.ClientConfig(p.TLS)); serr == nil || cerr == nil {
			t.Errorf("a client certificate %s: accepted (server %v, client %v), want refused", name, serr, cerr)
		}
	}
	ok := ca.ClientWith(t, "ok", valid(-time.Hour, time.Hour))
	if serr, cerr := handshake(t, cfg, ca.ClientConfig(ok.TLS)); serr != nil || cerr != nil {
		t.Errorf("a valid client certificate: refused (server %v, client %v)", serr, cerr)
	}
}

// TestVersionsAndCiphers: TLS 1.2 and 1.3 only, and over TLS 1.2 only the
// forward-secret AEAD suites (ECDHE with AES-GCM or ChaCha20-Poly1305), as
// HTTP/2 requires (RFC 9113 9.2.2): a client offering only CBC suites, or
// at most TLS 1.1, is refused.
func TestVersionsAndCiphers(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	srv := ca.Server(t)
	cfg, err := tlsconf.Load(tlsconf.Options{Cert: srv.CertFile, Key: srv.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	client := func(maxVersion uint16, suites ...uint16) *tls.Config {
		c := ca.ClientConfig()
		c.MinVersion, c.MaxVersion, c.CipherSuites = tls.VersionTLS10, maxVersion, suites
		return c
	}
	for _, c := range []struct {
		name string
		ccfg *tls.Config
		ok   bool
	}{
		{"TLS 1.3", client(tls.VersionTLS13), true},
		{"TLS 1.2, Go's default suites", client(tls.VersionTLS12), true},
		{"TLS 1.2, ECDHE-ECDSA-AES128-GCM-SHA256", client(tls.VersionTLS12, tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256), true},
		{"TLS 1.2, ECDHE-ECDSA-CHACHA20-POLY1305", client(tls.VersionTLS12, tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256), true},
		{"TLS 1.2, ECDHE-ECDSA-AES256-GCM-SHA384", client(tls.VersionTLS12, tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384), true},
		{"TLS 1.2, ECDHE-ECDSA-AES128-SHA (CBC)", client(tls.VersionTLS12, tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA), false},
		{"TLS 1.2, ECDHE-ECDSA-AES256-SHA (CBC)", client(tls.VersionTLS12, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA), false},
		{"TLS 1.1", client(tls.VersionTLS11), false},
	} {
		serr, cerr := handshake(t, cfg, c.ccfg)
		if got := serr == nil && cerr == nil; got != c.ok {
			t.Errorf("%s: accepted %v (server %v, client %v), want %v", c.name, got, serr, cerr, c.ok)
		}
	}
}

// TestReloadableResumption: after a Reloadable's client CA changes, a
// client of the old CA is refused, also when it resumes a session made
// before (TLS 1.2 and 1.3), and a client of the new CA is accepted.
func TestReloadableResumption(t *testing.T) {
	srv := tlstest.NewCA(t, "server").Server(t)
	oldCA, newCA := tlstest.NewCA(t, "old"), tlstest.NewCA(t, "new")
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	copyFile := func(from string) {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(caFile, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		copyFile(oldCA.File)
		r, err := tlsconf.NewReloadable(tlsconf.Options{Cert: srv.CertFile, Key: srv.KeyFile, ClientCA: caFile, ClientSANs: []string{"gw"}}, "http/1.1")
		if err != nil {
			t.Fatal(err)
		}
		cfg := r.Config()
		ccfg := oldCA.ClientConfig(oldCA.Client(t, "gw", []string{"gw"}).TLS)
		ccfg.RootCAs = nil
		ccfg.InsecureSkipVerify = true // the server's CA is not the point here
		ccfg.MaxVersion = v
		ccfg.ClientSessionCache = tls.NewLRUClientSessionCache(4)
		for i := range 2 {
			serr, cerr, resumed := resume(t, cfg, ccfg)
			if serr != nil || cerr != nil {
				t.Fatalf("TLS %x, old CA, before the change, handshake %d: %v / %v", v, i, serr, cerr)
			}
			if i == 1 && !resumed {
				t.Fatalf("TLS %x: the second handshake did not resume: the test would not test resumption", v)
			}
		}
		copyFile(newCA.File)
		if changed, err := r.Reload(); !changed || err != nil {
			t.Fatalf("TLS %x: Reload after the CA file changed = %v, %v; want changed", v, changed, err)
		}
		if serr, cerr := handshake(t, cfg, ccfg); serr == nil && cerr == nil {
			t.Errorf("TLS %x: the old CA's client resuming after the CA changed: accepted, want refused", v)
		}
		nc := newCA.ClientConfig(newCA.Client(t, "gw", []string{"gw"}).TLS)
		nc.RootCAs, nc.InsecureSkipVerify, nc.MaxVersion = nil, true, v
		if serr, cerr := handshake(t, cfg, nc); serr != nil || cerr != nil {
			t.Errorf("TLS %x: the new CA's client: %v / %v, want accepted", v, serr, cerr)
		}
	}
}

// TestClientCABundleDamaged: a client CA bundle of which one certificate
// does not parse (the new CA of a rotation, cut short) is an error naming
// the file, not a pool of the others that would refuse every client of
// the lost CA.
func TestClientCABundleDamaged(t *testing.T) {
	srv := tlstest.NewCA(t, "server").Server(t)
	a, b := tlstest.NewCA(t, "a"), tlstest.NewCA(t, "b")
	ab, err := os.ReadFile(a.File)
	if err != nil {
		t.Fatal(err)
	}
	bb, _ := os.ReadFile(b.File)
	blk, _ := pem.Decode(bb)
	blk.Bytes = blk.Bytes[:len(blk.Bytes)/2]
	bundle := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(bundle, append(ab, pem.EncodeToMemory(blk)...), 0o600)
	_, err = tlsconf.Load(tlsconf.Options{Cert: srv.CertFile, Key: srv.KeyFile, ClientCA: bundle})
	var te *tlsconf.Error
	if !errors.As(err, &te) || te.Field != "client_ca" || te.Path != bundle || !strings.Contains(err.Error(), "certificate 2") {
		t.Errorf("Load with a client CA bundle whose 2nd certificate is cut: %v, want an error on client_ca naming %s and its certificate 2", err, bundle)
	}
}

// TestChainOutOfOrder: a certificate file whose chain puts the CA before
// the server's own certificate is an error on cert saying so, not one on
// the key (which does match a certificate of the file).
func TestChainOutOfOrder(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	srv := ca.Server(t)
	leaf, _ := os.ReadFile(srv.CertFile)
	root, _ := os.ReadFile(ca.File)
	chain := filepath.Join(t.TempDir(), "chain.pem")
	os.WriteFile(chain, append(root, leaf...), 0o600)
	_, err := tlsconf.Load(tlsconf.Options{Cert: chain, Key: srv.KeyFile})
	var te *tlsconf.Error
	if !errors.As(err, &te) || te.Field != "cert" || te.Path != chain || !strings.Contains(err.Error(), "first") {
		t.Errorf("Load with the chain's CA first: %v, want an error on cert naming %s and saying its certificate must come first", err, chain)
	}
}
