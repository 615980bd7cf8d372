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

// startXDSOverMTLS runs a TLS xDS server that requires a client
// certificate of ca, and the daemon subscribing to it with the client
// pair first, copied to files of its own (a reload reads them again);
// each client certificate the server accepts has its common name sent
// to the channel returned.
func startXDSOverMTLS(t *testing.T, ca *tlstest.CA, first tlstest.Pair) (x *xdsServer, ed *envoyDaemon, certFile, keyFile string, clients chan string) {
	t.Helper()
	clients = make(chan string, 100)
	x = startXDSServer(t, grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{ca.Server(t).TLS},
		ClientCAs:    ca.Pool(),
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
		VerifyConnection: func(cs tls.ConnectionState) error {
			clients <- cs.PeerCertificates[0].Subject.CommonName
			return nil
		},
	})))
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	replace(t, certFile, read(t, first.CertFile))
	replace(t, keyFile, read(t, first.KeyFile))
	ed = startXDSDaemon(t, x, "tls: {ca: "+ca.File+", cert: "+certFile+", key: "+keyFile+", server_name: localhost}")
	return x, ed, certFile, keyFile, clients
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
	ca := tlstest.NewCA(t, "xds-ca")
	x, ed, certFile, keyFile, clients := startXDSOverMTLS(t, ca, ca.Client(t, "sluice-1", []string{"sluice"}))
	waitClient(t, clients, "sluice-1")
	x.set("v1", rlc("shop", "shop", perDay("tenant", "acme", 3)))
	x.waitACK("v1")

	// A broken certificate (half written): refused, naming the key and
	// file; nothing changes.
	good := read(t, certFile)
	replace(t, certFile, good[:len(good)/2])
	err := ed.d.Reload()
	if err == nil || !strings.Contains(err.Error(), "grpc.xds.tls") || !strings.Contains(err.Error(), certFile) {
		t.Fatalf("Reload with a broken grpc.xds.tls.cert = %v, want a refusal naming grpc.xds.tls and %s", err, certFile)
	}
	x.set("v2", rlc("shop", "shop", perDay("tenant", "acme", 4)))
	x.waitACK("v2")
	if got := ed.limitOf("shop", "tenant", "acme"); got != 4 {
		t.Errorf("after the refused reload, shop tenant=acme limit %d, want 4 (v2, over the subscription in force)", got)
	}

	// Unchanged files: the subscription is not made again.
	replace(t, certFile, good)
	if err := ed.d.Reload(); err != nil {
		t.Fatalf("Reload with the files as they were: %v", err)
	}
	x.set("v3", rlc("shop", "shop", perDay("tenant", "acme", 5)))
	x.waitACK("v3")
	select {
	case cn := <-clients:
		t.Errorf("client certificate %q accepted again after a reload that changed no file: want the connection kept", cn)
	default:
	}

	// Rotated: the new certificate is presented, and the new
	// subscription says the version it holds.
	next := ca.Client(t, "sluice-2", []string{"sluice"})
	replace(t, keyFile, read(t, next.KeyFile))
	replace(t, certFile, read(t, next.CertFile))
	if err := ed.d.Reload(); err != nil {
		t.Fatalf("Reload with a rotated client certificate: %v", err)
	}
	waitClient(t, clients, "sluice-2")
	again := x.waitRequest("new subscription", func(r *discovery.DiscoveryRequest) bool { return r.GetResponseNonce() == "" })
	if again.GetVersionInfo() != "v3" {
		t.Errorf("subscription made again with version %q, want v3 (the version in force)", again.GetVersionInfo())
	}
	x.set("v4", rlc("shop", "shop", perDay("tenant", "acme", 6)))
	x.waitACK("v4")
	if got := ed.limitOf("shop", "tenant", "acme"); got != 6 {
		t.Errorf("after the rotation, shop tenant=acme limit %d, want 6 (v4)", got)
	}
	if logs := ed.logs.String(); !strings.Contains(logs, "grpc.xds.tls: files changed") {
		t.Error("the rotation was not logged")
	}
}

// grpc.xds.tls's files are watched as the listeners' are: a client
// certificate rotated by renames (cert-manager, a Secret's ..data swap)
// is presented without a SIGHUP.
func TestXDSTLSRotatedWithoutReload(t *testing.T) {
	ca := tlstest.NewCA(t, "xds-ca")
	x, ed, certFile, keyFile, clients := startXDSOverMTLS(t, ca, ca.Client(t, "sluice-1", []string{"sluice"}))
	waitClient(t, clients, "sluice-1")
	x.set("v1", rlc("shop", "shop", perDay("tenant", "acme", 3)))
	x.waitACK("v1")

	next := ca.Client(t, "sluice-2", []string{"sluice"})
	replace(t, keyFile, read(t, next.KeyFile))
	replace(t, certFile, read(t, next.CertFile))
	waitClient(t, clients, "sluice-2")
	again := x.waitRequest("new subscription", func(r *discovery.DiscoveryRequest) bool { return r.GetResponseNonce() == "" })
	if again.GetVersionInfo() != "v1" {
		t.Errorf("subscription made again with version %q, want v1 (the version in force)", again.GetVersionInfo())
	}
	x.set("v2", rlc("shop", "shop", perDay("tenant", "acme", 4)))
	x.waitACK("v2")
	if got := ed.limitOf("shop", "tenant", "acme"); got != 4 {
		t.Errorf("after the rotation, shop tenant=acme limit %d, want 4 (v2)", got)
	}
}
