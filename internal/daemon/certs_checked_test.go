//go:build linux

package daemon

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// pool is a pool of the certificates of cas.
func pool(cas ...*tlstest.CA) *x509.CertPool {
	p := x509.NewCertPool()
	for _, ca := range cas {
		p.AddCert(ca.Cert)
	}
	return p
}

// bundle is the PEM of the certificates of cas, one after the other.
func bundle(t *testing.T, cas ...*tlstest.CA) string {
	t.Helper()
	var b strings.Builder
	for _, ca := range cas {
		b.Write(read(t, ca.File))
	}
	return b.String()
}

// startClientCADaemon starts a daemon whose API serves srv's certificate
// and asks clients for one signed by a CA of caFile's bundle, and returns
// it with the client CAs its API has in force.
func startClientCADaemon(t *testing.T, srv tlstest.Pair, caFile string) (*testDaemon, func() *x509.CertPool) {
	t.Helper()
	td := startDaemon(t, "listen: 127.0.0.1:0\napi:\n  tls: {cert: "+srv.CertFile+", key: "+srv.KeyFile+", client_ca: "+caFile+"}\n"+
		"rules:\n  - {name: all, rate: 5/m}\n")
	return td, func() *x509.CertPool {
		cfg, err := td.d.tls[0].Config().GetConfigForClient(nil)
		if err != nil {
			t.Fatal(err)
		}
		return cfg.ClientCAs
	}
}

// halfWritten has r replace path with half, by a writer that then
// pauses, once the certificate reload of what has checked its files;
// makes an event in path's directory, so that they are read again; and
// waits until that reload is over: it logged the file as being written
// in place, or (what the test must then catch) reloaded. It returns the
// writer's file, for the rest.
func (r *replacer) halfWritten(t *testing.T, logs *redistest.SyncBuffer, what, path, half, reloaded string) *os.File {
	t.Helper()
	r.what, r.path, r.half = what, path, half
	close(r.arm)
	mustWrite(t, filepath.Join(filepath.Dir(path), "other"), "x")
	f := r.writer(t)
	waitFor(t, "the bundle replaced after the check, half written, its writer at work", func() bool {
		l := logs.String()
		return strings.Contains(l, "certificate file is being written in place") || strings.Contains(l, reloaded)
	})
	return f
}

// reloadedOnce checks that the files of name were put in force once
// (reloaded logged once): the whole bundle, never its half; and that no
// half was read and refused either.
func reloadedOnce(t *testing.T, logs *redistest.SyncBuffer, name, reloaded string) {
	t.Helper()
	l := logs.String()
	if n := strings.Count(l, reloaded); n != 1 {
		t.Errorf("%s put in force %d times, want once (the whole bundle; never its half)", name, n)
	}
	if strings.Contains(l, "files not reloaded") {
		t.Error("a half written file was read and refused")
	}
}

// TestClientCABundleReplacedAfterCheck: api.tls.client_ca, a bundle of
// CA b, is removed and created again as the bundle of CAs a and c by a
// writer that writes a's certificate and pauses, after the certificate
// reload checked that no file is being written and before it reads the
// files. The half bundle parses (a alone), and is wrong: it is never put
// in force, clients of b are still let in while the writer is at work;
// once the writer has closed the file the whole bundle is in force, and
// a client of c, in its second half, is let in.
func TestClientCABundleReplacedAfterCheck(t *testing.T) {
	r := replaceAfterCheck(t)
	a, b, c := tlstest.NewCA(t, "clients-a"), tlstest.NewCA(t, "clients-b"), tlstest.NewCA(t, "clients-c")
	srv := b.Server(t)
	ofB, ofC := b.Client(t, "gw-b", []string{"gw.test"}), c.Client(t, "gw-c", []string{"gw.test"})
	dir := t.TempDir()
	caFile := filepath.Join(dir, "clients.pem")
	mustWrite(t, caFile, bundle(t, b))
	td, inForce := startClientCADaemon(t, srv, caFile)
	// letIn reports whether the API lets a client presenting p in.
	letIn := func(p tlstest.Pair) bool {
		tr := &http.Transport{TLSClientConfig: b.ClientConfig(p.TLS)}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Get("https://" + td.d.Addrs().API + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	}
	if !letIn(ofB) || letIn(ofC) {
		t.Fatal("before the change: want a client of b let in, one of c refused")
	}

	f := r.halfWritten(t, td.logs, "listener api", caFile, bundle(t, a), "tls: certificate reloaded")
	if !inForce().Equal(pool(b)) {
		t.Fatal("client CAs in force changed while the bundle was half written: want b's, as before (the half never in force)")
	}
	if !letIn(ofB) {
		t.Fatal("a client of b refused while the bundle is half written: the half bundle is in force")
	}

	writeRest(t, f, bundle(t, c))
	waitFor(t, "the whole bundle in force once its writer closed it", func() bool { return inForce().Equal(pool(a, c)) })
	if !letIn(ofC) {
		t.Error("a client of c, in the bundle's second half, refused with the whole bundle in place")
	}
	if letIn(ofB) {
		t.Error("a client of b let in after the bundle without b is in force")
	}
	reloadedOnce(t, td.logs, "client CAs", "tls: certificate reloaded")
}

// TestRedisCABundleReplacedAfterCheck: store.redis.tls.ca, the bundle of
// Redis's CA s, is removed and created again as the bundle of CAs x and
// s by a writer that writes x's certificate and pauses, after the
// certificate reload checked that no file is being written and before it
// reads them. The half bundle (x alone) parses, and would fail every
// connection to Redis dialled with it: it is never put in force; the
// whole bundle is once the writer has closed the file, and decisions
// are made on Redis over connections dialled with it.
func TestRedisCABundleReplacedAfterCheck(t *testing.T) {
	r := replaceAfterCheck(t)
	s, x := tlstest.NewCA(t, "redis-server"), tlstest.NewCA(t, "other")
	srv := s.Server(t)
	rs := redistest.StartTLSServer(t, srv.CertFile, srv.KeyFile)
	dir := t.TempDir()
	caFile := filepath.Join(dir, "redis-ca.pem")
	mustWrite(t, caFile, bundle(t, s))
	td := startDaemon(t, redisTLSYAML([]string{rs.TLSAddr}, "", "{ca: "+caFile+"}", "1000/h"))
	before := td.d.redisTLS.Load()

	f := r.halfWritten(t, td.logs, "block store.redis.tls", caFile, bundle(t, x), "store.redis.tls: files changed")
	if td.d.redisTLS.Load() != before {
		t.Fatal("store.redis.tls in force changed while its CA bundle was half written: the half is in force")
	}

	wholeRedisBundle(t, td, f, rs.Addr, x, s)
	reloadedOnce(t, td.logs, "store.redis.tls", "store.redis.tls: files changed")
}

// TestXDSCABundleReplacedAfterCheck: grpc.xds.tls.ca, the bundle of the
// xDS server's CA s, is removed and created again as the bundle of CAs x
// and s by a writer that writes x's certificate and pauses, after the
// certificate reload checked that no file is being written and before it
// reads them. The half bundle (x alone) parses, and a subscription made
// again with it would fail: it is never put in force; the whole bundle
// is once the writer has closed the file, and the subscription made
// again with it gets the server's next version.
func TestXDSCABundleReplacedAfterCheck(t *testing.T) {
	r := replaceAfterCheck(t)
	s, x := tlstest.NewCA(t, "xds-ca"), tlstest.NewCA(t, "other")
	xs := startXDSServer(t, grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{s.Server(t).TLS},
		MinVersion:   tls.VersionTLS12,
	})))
	dir := t.TempDir()
	caFile := filepath.Join(dir, "xds-ca.pem")
	mustWrite(t, caFile, bundle(t, s))
	ed := startXDSDaemon(t, xs, "tls: {ca: "+caFile+", server_name: localhost}")
	xs.set("v1", rlc("shop", "shop", perDay("tenant", "acme", 3)))
	xs.waitACK("v1")
	before := ed.d.xdsTLS.Load()

	f := r.halfWritten(t, ed.logs, "block grpc.xds.tls", caFile, bundle(t, x), "grpc.xds.tls: files changed")
	if ed.d.xdsTLS.Load() != before {
		t.Fatal("grpc.xds.tls in force changed while its CA bundle was half written: the half is in force")
	}

	writeRest(t, f, bundle(t, s))
	waitFor(t, "the whole bundle in force once its writer closed it", func() bool {
		c := ed.d.xdsTLS.Load()
		return c.RootCAs != nil && c.RootCAs.Equal(pool(x, s))
	})
	xs.waitRequest("the subscription made again with the whole bundle", func(r *discovery.DiscoveryRequest) bool {
		return r.GetResponseNonce() == "" && r.GetVersionInfo() == "v1"
	})
	xs.set("v2", rlc("shop", "shop", perDay("tenant", "acme", 4)))
	xs.waitACK("v2")
	if got := ed.limitOf("shop", "tenant", "acme"); got != 4 {
		t.Errorf("shop tenant=acme limit %d after the new subscription, want 4 (v2)", got)
	}
	reloadedOnce(t, ed.logs, "grpc.xds.tls", "grpc.xds.tls: files changed")
}

// TestClientCABundleKeepsChanging: api.tls.client_ca is replaced (by a
// rename, whole each time) after every check of a certificate reload, as
// many times as it reads the files: none of the bundles it read is put in
// force, as the files kept changing under it; it says so once, and the
// files are read again at their next change (the renames' events): the
// bundle left in place then is put in force, the one client CA change.
func TestClientCABundleKeepsChanging(t *testing.T) {
	a, b, c := tlstest.NewCA(t, "clients-a"), tlstest.NewCA(t, "clients-b"), tlstest.NewCA(t, "clients-c")
	srv := b.Server(t)
	dir := t.TempDir()
	caFile := filepath.Join(dir, "clients.pem")
	mustWrite(t, caFile, bundle(t, b))
	// Each read of the reload meets another bundle: a's, c's, then a's
	// and c's, left in place.
	next := [maxReads]string{bundle(t, a), bundle(t, c), bundle(t, a, c)}
	arm, replaced := make(chan struct{}), make(chan struct{})
	n := 0 // the hook's, under the daemon's reloadMu
	setCheckedHook(t, func(w string) {
		select {
		case <-arm:
		default:
			return
		}
		if w != "listener api" || n == maxReads {
			return
		}
		replace(t, caFile, []byte(next[n]))
		if n++; n == maxReads {
			close(replaced)
		}
	})
	td, inForce := startClientCADaemon(t, srv, caFile)

	close(arm)
	mustWrite(t, filepath.Join(dir, "other"), "x") // an event in its directory: the files read again
	select {
	case <-replaced:
	case <-time.After(time.Minute): // a hang detector, not a bound
		t.Fatal("the bundle was not replaced at each read within a minute")
	}
	const changing = "certificate files keep changing while they are read"
	waitFor(t, "the reload that read a bundle replaced each time", func() bool {
		l := td.logs.String()
		return strings.Contains(l, changing) || strings.Contains(l, "tls: certificate reloaded")
	})
	if !inForce().Equal(pool(b)) {
		t.Fatal("client CAs in force changed by a reload whose files were replaced at each read: want b's, as before")
	}
	waitFor(t, "the bundle left in place read at the next change", func() bool { return inForce().Equal(pool(a, c)) })
	l := td.logs.String()
	if got := strings.Count(l, changing); got != 1 {
		t.Errorf("%q logged %d times, want once", changing, got)
	}
	if got := strings.Count(l, "tls: certificate reloaded"); got != 1 {
		t.Errorf("client CAs put in force %d times, want once (the bundle left in place)", got)
	}
}

// wholeRedisBundle writes the rest of store.redis.tls's CA bundle, the
// bundle of x and s, into f, its writer's file, closing it; then waits
// for that whole bundle in force, and for decisions made on Redis (at
// addr) over connections dialled with it.
func wholeRedisBundle(t *testing.T, td *testDaemon, f *os.File, addr string, x, s *tlstest.CA) {
	t.Helper()
	writeRest(t, f, bundle(t, s))
	waitFor(t, "the whole bundle in force once its writer closed it", func() bool {
		c := td.d.redisTLS.Load()
		return c.RootCAs != nil && c.RootCAs.Equal(pool(x, s))
	})
	killRedisClients(t, addr)
	decidesOnRedis(t, td, "k", "with the whole bundle")
}
