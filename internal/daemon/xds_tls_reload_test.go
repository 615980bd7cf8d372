package daemon

import (
	"crypto/tls"
	"path/filepath"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// xdsMTLS is a TLS xDS server that requires a client certificate of ca,
// and the daemon subscribing to it with the client pair sluice-1, copied
// to files of its own (a reload reads them again), served v1 (shop
// tenant=acme: 3 a day); each client certificate the server accepts has
// its common name sent to clients.
type xdsMTLS struct {
	t                 *testing.T
	ca                *tlstest.CA
	x                 *xdsServer
	ed                *envoyDaemon
	certFile, keyFile string
	clients           chan string
}

func newXDSMTLS(t *testing.T) *xdsMTLS {
	t.Helper()
	m := &xdsMTLS{t: t, ca: tlstest.NewCA(t, "xds-ca"), clients: make(chan string, 100)}
	m.x = startXDSServer(t, grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{m.ca.Server(t).TLS},
		ClientCAs:    m.ca.Pool(),
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
		VerifyConnection: func(cs tls.ConnectionState) error {
			m.clients <- cs.PeerCertificates[0].Subject.CommonName
			return nil
		},
	})))
	first := m.ca.Client(t, "sluice-1", []string{"sluice"})
	dir := t.TempDir()
	m.certFile, m.keyFile = filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	replace(t, m.certFile, read(t, first.CertFile))
	replace(t, m.keyFile, read(t, first.KeyFile))
	m.ed = startXDSDaemon(t, m.x, "tls: {ca: "+m.ca.File+", cert: "+m.certFile+", key: "+m.keyFile+", server_name: localhost}")
	waitClient(t, m.clients, "sluice-1")
	m.serve("v1", 3)
	return m
}

// serve has the server send version v, shop tenant=acme n a day, and
// waits for the daemon's ACK of it.
func (m *xdsMTLS) serve(v string, n uint32) {
	m.t.Helper()
	m.x.set(v, rlc("shop", "shop", perDay("tenant", "acme", n)))
	m.x.waitACK(v)
}

// rotate writes a new client pair, sluice-2, over the daemon's files
// (the key first).
func (m *xdsMTLS) rotate() {
	m.t.Helper()
	next := m.ca.Client(m.t, "sluice-2", []string{"sluice"})
	replace(m.t, m.keyFile, read(m.t, next.KeyFile))
	replace(m.t, m.certFile, read(m.t, next.CertFile))
}

// checkRotated waits for the server to accept sluice-2 and for the
// subscription made again, which must say inForce, the version in force;
// then serves next, of limit n, and checks the daemon applies it.
func (m *xdsMTLS) checkRotated(inForce, next string, n uint32) {
	m.t.Helper()
	waitClient(m.t, m.clients, "sluice-2")
	again := m.x.waitRequest("new subscription", func(r *discovery.DiscoveryRequest) bool { return r.GetResponseNonce() == "" })
	if again.GetVersionInfo() != inForce {
		m.t.Errorf("subscription made again with version %q, want %s (the version in force)", again.GetVersionInfo(), inForce)
	}
	m.serve(next, n)
	if got := m.ed.limitOf("shop", "tenant", "acme"); got != n {
		m.t.Errorf("after the rotation, shop tenant=acme limit %d, want %d (%s)", got, n, next)
	}
}

// waitClient waits for the xDS server to accept a client certificate
// named cn (others before it are dropped).
func waitClient(t *testing.T, clients chan string, cn string) {
	t.Helper()
	deadline := time.NewTimer(30 * time.Second) // a failure's bound, not a synchronisation
	defer deadline.Stop()
	for {
		select {
		case got := <-clients:
			if got == cn {
				return
			}
		case <-deadline.C:
			t.Fatalf("the xDS server accepted no client certificate %q", cn)
		}
	}
}

// A reload reads grpc.xds.tls's files again: a rotated client
// certificate is presented by a subscription made again at once, which
// sends the version in force; a broken file refuses the reload, naming
// it, and the subscription in force carries on.
func TestXDSTLSReloadRotatesClientCert(t *testing.T) {
	m := newXDSMTLS(t)

	// A broken certificate (half written): refused, naming the key and
	// file; nothing changes.
	good := read(t, m.certFile)
	replace(t, m.certFile, good[:len(good)/2])
	err := m.ed.d.Reload()
	if err == nil || !strings.Contains(err.Error(), "grpc.xds.tls") || !strings.Contains(err.Error(), m.certFile) {
		t.Fatalf("Reload with a broken grpc.xds.tls.cert = %v, want a refusal naming grpc.xds.tls and %s", err, m.certFile)
	}
	m.serve("v2", 4)
	if got := m.ed.limitOf("shop", "tenant", "acme"); got != 4 {
		t.Errorf("after the refused reload, shop tenant=acme limit %d, want 4 (v2, over the subscription in force)", got)
	}

	// Unchanged files: the subscription is not made again.
	replace(t, m.certFile, good)
	if err := m.ed.d.Reload(); err != nil {
		t.Fatalf("Reload with the files as they were: %v", err)
	}
	m.serve("v3", 5)
	select {
	case cn := <-m.clients:
		t.Errorf("client certificate %q accepted again after a reload that changed no file: want the connection kept", cn)
	default:
	}

	// Rotated: the new certificate is presented, and the new
	// subscription says the version it holds.
	m.rotate()
	if err := m.ed.d.Reload(); err != nil {
		t.Fatalf("Reload with a rotated client certificate: %v", err)
	}
	m.checkRotated("v3", "v4", 6)
	if logs := m.ed.logs.String(); !strings.Contains(logs, "grpc.xds.tls: files changed") {
		t.Error("the rotation was not logged")
	}
}

// grpc.xds.tls's files are watched as the listeners' are: a client
// certificate rotated by renames (cert-manager, a Secret's ..data swap)
// is presented without a SIGHUP.
func TestXDSTLSRotatedWithoutReload(t *testing.T) {
	m := newXDSMTLS(t)
	m.rotate()
	m.checkRotated("v1", "v2", 4)
}
