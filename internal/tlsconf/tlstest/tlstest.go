// Package tlstest makes the certificates the TLS tests use, at test time
// (nothing committed that could expire): a CA, server certificates for
// 127.0.0.1 and localhost, and client certificates with chosen names.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority made for one test.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// File is the CA certificate as a PEM file (a client_ca).
	File string
	dir  string
}

// NewCA makes a CA whose files live in a temporary directory of t.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, tmpl := newKey(t, name)
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	tmpl.BasicConstraintsValid, tmpl.IsCA = true, true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &CA{Cert: cert, key: key, dir: t.TempDir()}
	ca.File = write(t, ca.dir, name+"-ca.pem", "CERTIFICATE", der)
	return ca
}

// newKey makes a key and the template every certificate here starts from:
// named name, valid from an hour ago for a day.
func newKey(t testing.TB, name string) (*ecdsa.PrivateKey, *x509.Certificate) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key, &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
}

// Pair is a certificate and key, as files and loaded.
type Pair struct {
	CertFile, KeyFile string
	TLS               tls.Certificate
}

// Server makes a server certificate for 127.0.0.1, ::1 and localhost.
func (ca *CA) Server(t testing.TB) Pair {
	t.Helper()
	return ca.issue(t, "server", x509.ExtKeyUsageServerAuth, []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, nil)
}

// ServerWith makes a server certificate as Server does, named name, as
// edit leaves the template (its validity, say).
func (ca *CA) ServerWith(t testing.TB, name string, edit func(*x509.Certificate)) Pair {
	t.Helper()
	return ca.issue(t, name, x509.ExtKeyUsageServerAuth, []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, nil, edit)
}

// Peer issues a certificate for 127.0.0.1 and localhost that is valid
// both as a server's and as a client's: for servers that connect to each
// other, such as the nodes of a Redis Cluster on a TLS cluster bus.
func (ca *CA) Peer(t testing.TB) Pair {
	t.Helper()
	return ca.issue(t, "peer", x509.ExtKeyUsageServerAuth, []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, nil,
		func(c *x509.Certificate) { c.ExtKeyUsage = append(c.ExtKeyUsage, x509.ExtKeyUsageClientAuth) })
}

// Client makes a client certificate whose SANs are the DNS names dns and
// the URIs uris.
func (ca *CA) Client(t testing.TB, name string, dns []string, uris ...string) Pair {
	t.Helper()
	var us []*url.URL
	for _, u := range uris {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		us = append(us, pu)
	}
	return ca.issue(t, name, x509.ExtKeyUsageClientAuth, dns, nil, us)
}

// ClientWith makes a client certificate named name, as edit leaves the
// template (SANs, validity): an IP SAN, an expired certificate.
func (ca *CA) ClientWith(t testing.TB, name string, edit func(*x509.Certificate)) Pair {
	t.Helper()
	return ca.issue(t, name, x509.ExtKeyUsageClientAuth, nil, nil, nil, edit)
}

func (ca *CA) issue(t testing.TB, name string, usage x509.ExtKeyUsage, dns []string, ips []net.IP, uris []*url.URL, edits ...func(*x509.Certificate)) Pair {
	key, tmpl := newKey(t, name)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{usage}
	tmpl.DNSNames, tmpl.IPAddresses, tmpl.URIs = dns, ips, uris
	for _, edit := range edits {
		edit(tmpl)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	p := Pair{
		CertFile: write(t, ca.dir, name+".pem", "CERTIFICATE", der),
		KeyFile:  write(t, ca.dir, name+"-key.pem", "PRIVATE KEY", kb),
	}
	if p.TLS, err = tls.LoadX509KeyPair(p.CertFile, p.KeyFile); err != nil {
		t.Fatal(err)
	}
	return p
}

// Pool is a pool holding the CA, for clients to trust the server.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// ClientConfig is a client configuration trusting ca, presenting certs.
func (ca *CA) ClientConfig(certs ...tls.Certificate) *tls.Config {
	return &tls.Config{RootCAs: ca.Pool(), Certificates: certs, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func write(t testing.TB, dir, name, typ string, der []byte) string {
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
