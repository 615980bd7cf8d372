package tlsconf_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/tlsconf"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// copyPair writes p's certificate and key over cert and key.
func copyPair(t *testing.T, p tlstest.Pair, cert, key string) {
	t.Helper()
	for from, to := range map[string]string{p.CertFile: cert, p.KeyFile: key} {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// served runs a handshake of a client trusting ca (nil: verifying
// nothing), whose clock reads at, and returns the certificate the server
// presented.
func served(t *testing.T, cfg *tls.Config, ca *tlstest.CA, at time.Time, certs ...tls.Certificate) *x509.Certificate {
	t.Helper()
	var got *x509.Certificate
	ccfg := &tls.Config{InsecureSkipVerify: true, Certificates: certs}
	if ca != nil {
		ccfg = ca.ClientConfig(certs...)
	}
	ccfg.Time = func() time.Time { return at }
	ccfg.VerifyConnection = func(cs tls.ConnectionState) error { got = cs.PeerCertificates[0]; return nil }
	if serr, cerr := handshake(t, cfg, ccfg); serr != nil || cerr != nil {
		t.Fatalf("handshake at %v: server %v, client %v", at, serr, cerr)
	}
	return got
}

type testClock struct{ at atomic.Int64 }

func (c *testClock) now() time.Time       { return time.Unix(0, c.at.Load()) }
func (c *testClock) set(t time.Time)      { c.at.Store(t.UnixNano()) }
func newTestClock(t time.Time) *testClock { c := &testClock{}; c.set(t); return c }

// TestReloadableHoldsCertNotYetValid: a renewed certificate whose validity
// starts later (issued ahead, or by a CA whose clock runs ahead) is not
// served while the one in force is still valid: clients would refuse it.
// Reload says so and when it starts; the client CA read with it is in
// force at once; from its NotBefore on the new certificate is served,
// without another reload, and the listener is told.
func TestReloadableHoldsCertNotYetValid(t *testing.T) {
	ca := tlstest.NewCA(t, "server")
	now := time.Now().Truncate(time.Second)
	clock := newTestClock(now)
	old := ca.Server(t)
	next := ca.ServerWith(t, "next", func(c *x509.Certificate) { c.NotBefore, c.NotAfter = now.Add(2*time.Hour), now.Add(48*time.Hour) })
	oldCA, newCA := tlstest.NewCA(t, "old"), tlstest.NewCA(t, "new")
	dir := t.TempDir()
	o := tlsconf.Options{Cert: filepath.Join(dir, "cert.pem"), Key: filepath.Join(dir, "key.pem"), ClientCA: filepath.Join(dir, "ca.pem"), Now: clock.now}
	copyPair(t, old, o.Cert, o.Key)
	copyPair(t, tlstest.Pair{CertFile: oldCA.File, KeyFile: oldCA.File}, o.ClientCA, o.ClientCA)
	r, err := tlsconf.NewReloadable(o, "http/1.1")
	if err != nil {
		t.Fatal(err)
	}
	var inForce []*x509.Certificate
	r.WhenInForce(func(c *x509.Certificate) { inForce = append(inForce, c) })
	cfg := r.Config()

	copyPair(t, next, o.Cert, o.Key)
	copyPair(t, tlstest.Pair{CertFile: newCA.File, KeyFile: newCA.File}, o.ClientCA, o.ClientCA)
	changed, err := r.Reload()
	var nyv *tlsconf.NotYetValidError
	if !errors.As(err, &nyv) || !nyv.NotBefore.Equal(now.Add(2*time.Hour)) || !strings.Contains(err.Error(), o.Cert) {
		t.Fatalf("Reload of a certificate valid from %v: %v; want a NotYetValidError naming the file and that time", now.Add(2*time.Hour), err)
	}
	if !changed {
		t.Errorf("Reload with a new client CA: changed false, want true (the CA is in force at once)")
	}
	client := newCA.Client(t, "gw", []string{"gw"}).TLS
	if got := served(t, cfg, ca, now, client); got.SerialNumber.Cmp(old.TLS.Leaf.SerialNumber) != 0 {
		t.Errorf("before its NotBefore: served serial %v, want the old certificate's %v", got.SerialNumber, old.TLS.Leaf.SerialNumber)
	}
	if r.Leaf().SerialNumber.Cmp(old.TLS.Leaf.SerialNumber) != 0 || len(inForce) != 0 {
		t.Errorf("before its NotBefore: Leaf serial %v, %d told; want the old certificate, none", r.Leaf().SerialNumber, len(inForce))
	}

	clock.set(now.Add(2*time.Hour + time.Second))
	for i := range 2 {
		if got := served(t, cfg, ca, clock.now(), client); got.SerialNumber.Cmp(next.TLS.Leaf.SerialNumber) != 0 {
			t.Errorf("after its NotBefore, handshake %d: served serial %v, want the new certificate's %v", i, got.SerialNumber, next.TLS.Leaf.SerialNumber)
		}
	}
	if len(inForce) != 1 || inForce[0].SerialNumber.Cmp(next.TLS.Leaf.SerialNumber) != 0 || r.Leaf().SerialNumber.Cmp(next.TLS.Leaf.SerialNumber) != 0 {
		t.Errorf("after its NotBefore: told %d times, Leaf serial %v; want once, the new certificate", len(inForce), r.Leaf().SerialNumber)
	}
	if changed, err := r.Reload(); changed || err != nil {
		t.Errorf("Reload of the same files once in force = %v, %v; want unchanged", changed, err)
	}
}

// TestReloadableHeldCertReplaced: a certificate held until its NotBefore
// is dropped when the files change again to one valid now, and is not
// served later; and when the certificate in force has expired, one not
// yet valid is served at once (nothing valid is lost by it, and it will
// be valid first).
func TestReloadableHeldCertReplaced(t *testing.T) {
	ca := tlstest.NewCA(t, "server")
	now := time.Now().Truncate(time.Second)
	clock := newTestClock(now)
	old, third := ca.Server(t), ca.ServerWith(t, "third", func(*x509.Certificate) {})
	next := ca.ServerWith(t, "next", func(c *x509.Certificate) { c.NotBefore, c.NotAfter = now.Add(2*time.Hour), now.Add(48*time.Hour) })
	dir := t.TempDir()
	o := tlsconf.Options{Cert: filepath.Join(dir, "cert.pem"), Key: filepath.Join(dir, "key.pem"), Now: clock.now}
	copyPair(t, old, o.Cert, o.Key)
	r, err := tlsconf.NewReloadable(o)
	if err != nil {
		t.Fatal(err)
	}
	cfg := r.Config()
	copyPair(t, next, o.Cert, o.Key)
	var nyv *tlsconf.NotYetValidError
	if _, err := r.Reload(); !errors.As(err, &nyv) {
		t.Fatalf("Reload of a certificate not valid yet: %v, want a NotYetValidError", err)
	}
	copyPair(t, third, o.Cert, o.Key)
	if changed, err := r.Reload(); !changed || err != nil {
		t.Fatalf("Reload of a certificate valid now = %v, %v; want changed", changed, err)
	}
	clock.set(now.Add(3 * time.Hour))
	if got := served(t, cfg, ca, clock.now()); got.SerialNumber.Cmp(third.TLS.Leaf.SerialNumber) != 0 {
		t.Errorf("after the dropped certificate's NotBefore: served serial %v, want the third's %v", got.SerialNumber, third.TLS.Leaf.SerialNumber)
	}

	// The one in force (third) has expired: a certificate not valid yet
	// replaces it at once.
	clock.set(now.Add(25 * time.Hour))
	later := ca.ServerWith(t, "later", func(c *x509.Certificate) { c.NotBefore, c.NotAfter = now.Add(26*time.Hour), now.Add(48*time.Hour) })
	copyPair(t, later, o.Cert, o.Key)
	if changed, err := r.Reload(); !changed || err != nil {
		t.Fatalf("Reload of a certificate not valid yet over an expired one = %v, %v; want changed, no error", changed, err)
	}
	// (The test CA itself has expired by then: the client checks nothing.)
	if got := served(t, cfg, nil, now.Add(26*time.Hour)); got.SerialNumber.Cmp(later.TLS.Leaf.SerialNumber) != 0 {
		t.Errorf("over an expired certificate: served serial %v, want the new one's %v", got.SerialNumber, later.TLS.Leaf.SerialNumber)
	}
}

// TestReloadableKeepsCertOverExpired: a certificate read that has already
// expired (a backup restored, a renewal agent writing its stale copy) is
// not served while the one in force is still valid, as one not valid yet
// is not: every client would refuse it. Reload says so, naming the file
// and when it expired; the client CA read with it is in force at once.
// Once the one in force has expired too, it is served (nothing valid is
// lost).
func TestReloadableKeepsCertOverExpired(t *testing.T) {
	ca := tlstest.NewCA(t, "server")
	now := time.Now().Truncate(time.Second)
	clock := newTestClock(now)
	old := ca.Server(t) // valid for a day
	stale := ca.ServerWith(t, "stale", func(c *x509.Certificate) { c.NotBefore, c.NotAfter = now.Add(-48*time.Hour), now.Add(-time.Hour) })
	oldCA, newCA := tlstest.NewCA(t, "old"), tlstest.NewCA(t, "new")
	dir := t.TempDir()
	o := tlsconf.Options{Cert: filepath.Join(dir, "cert.pem"), Key: filepath.Join(dir, "key.pem"), ClientCA: filepath.Join(dir, "ca.pem"), Now: clock.now}
	copyPair(t, old, o.Cert, o.Key)
	copyPair(t, tlstest.Pair{CertFile: oldCA.File, KeyFile: oldCA.File}, o.ClientCA, o.ClientCA)
	r, err := tlsconf.NewReloadable(o, "http/1.1")
	if err != nil {
		t.Fatal(err)
	}
	cfg := r.Config()

	copyPair(t, stale, o.Cert, o.Key)
	copyPair(t, tlstest.Pair{CertFile: newCA.File, KeyFile: newCA.File}, o.ClientCA, o.ClientCA)
	changed, err := r.Reload()
	var exp *tlsconf.ExpiredError
	if !errors.As(err, &exp) || !exp.NotAfter.Equal(now.Add(-time.Hour)) || !strings.Contains(err.Error(), o.Cert) {
		t.Fatalf("Reload of a certificate expired at %v: %v; want an ExpiredError naming the file and that time", now.Add(-time.Hour), err)
	}
	if !changed {
		t.Errorf("Reload with a new client CA: changed false, want true (the CA is in force at once)")
	}
	client := newCA.Client(t, "gw", []string{"gw"}).TLS
	if got := served(t, cfg, ca, now, client); got.SerialNumber.Cmp(old.TLS.Leaf.SerialNumber) != 0 {
		t.Errorf("after reading an expired certificate: served serial %v, want the valid one in force, %v", got.SerialNumber, old.TLS.Leaf.SerialNumber)
	}

	clock.set(old.TLS.Leaf.NotAfter.Add(time.Second))
	if _, err := r.Reload(); err != nil {
		t.Errorf("Reload once the certificate in force has expired too: %v, want nil", err)
	}
	if got := r.Leaf(); got.SerialNumber.Cmp(stale.TLS.Leaf.SerialNumber) != 0 {
		t.Errorf("once the certificate in force has expired too: Leaf serial %v, want the files' %v", got.SerialNumber, stale.TLS.Leaf.SerialNumber)
	}
}
