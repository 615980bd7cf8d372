package tlsconf_test

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/tlsconf"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// handshake runs a TLS handshake over a real loopback connection between
// a server with cfg and a client with ccfg; it returns the server's error.
func handshake(t *testing.T, cfg, ccfg *tls.Config) (server, client error) {
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
		c.Close()
	}
	return <-done, err
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
