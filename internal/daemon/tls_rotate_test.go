package daemon

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// rotateDaemon runs a daemon whose decision API, proxy and gRPC listener
// serve the certificate and key at certFile and keyFile (mTLS on gRPC),
// with no reload asked for: the tests replace the files as cert-manager,
// Vault agent or a Kubernetes Secret volume does, and expect the listeners
// to serve the new certificate on their own.
type rotateDaemon struct {
	*testDaemon
	ca     *tlstest.CA
	client tlstest.Pair
}

func startRotateDaemon(t *testing.T, certFile, keyFile string) *rotateDaemon {
	t.Helper()
	ca := tlstest.NewCA(t, "rotate")
	rd := &rotateDaemon{ca: ca, client: ca.Client(t, "envoy", []string{"envoy.test"})}
	conf := filepath.Join(t.TempDir(), "sluice.yaml")
	tlsBlock := "{cert: " + certFile + ", key: " + keyFile + "}"
	mtls := "{cert: " + certFile + ", key: " + keyFile + ", client_ca: " + ca.File + ", client_sans: [envoy.test]}"
	descs := filepath.Join(t.TempDir(), "edge.yaml")
	os.WriteFile(descs, []byte("domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"), 0o644)
	if err := os.WriteFile(conf, []byte(`listen: 127.0.0.1:0
api:
  tls: `+tlsBlock+`
proxy:
  listen: 127.0.0.1:0
  upstream: http://127.0.0.1:9
  tls: `+tlsBlock+`
grpc:
  listen: 127.0.0.1:0
  config: [`+descs+`]
  tls: `+mtls+`
rules:
  - name: all
    rate: 5/m
`), 0o644); err != nil {
		t.Fatal(err)
	}
	rd.testDaemon = startDaemonFile(t, conf)
	return rd
}

// served returns the serial numbers of the certificates the decision API,
// proxy and gRPC listeners serve now.
func (rd *rotateDaemon) served(t *testing.T) [3]string {
	t.Helper()
	a := rd.d.Addrs()
	var s [3]string
	for i, addr := range []string{a.API, a.Proxy, a.GRPC} {
		cfg := rd.ca.ClientConfig(rd.client.TLS)
		cfg.NextProtos = []string{"h2"}
		c, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			t.Fatalf("TLS to %s: %v", addr, err)
		}
		s[i] = c.ConnectionState().PeerCertificates[0].SerialNumber.String()
		c.Close()
	}
	return s
}

// waitServed waits until every listener serves the certificate p.
func (rd *rotateDaemon) waitServed(t *testing.T, what string, p tlstest.Pair) {
	t.Helper()
	want := p.TLS.Leaf.SerialNumber.String()
	waitFor(t, what, func() bool { return rd.served(t) == [3]string{want, want, want} })
}

// replace writes data to a new file beside path and renames it over path,
// as cert-manager's CSI driver, Vault agent and most deploy tools do.
func replace(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCertRotatedByRename: a certificate and key replaced by renames are
// served without a reload; a broken replacement (a certificate without its
// key) is logged naming the file, and the certificate in force stays until
// the pair is whole again.
func TestCertRotatedByRename(t *testing.T) {
	rd, ca, certFile, keyFile, first := startRotatedFiles(t)
	rd.waitServed(t, "the first certificate served", first)

	second := ca.Server(t)
	replace(t, keyFile, read(t, second.KeyFile))
	replace(t, certFile, read(t, second.CertFile))
	rd.waitServed(t, "a certificate renewed by rename served without a reload", second)
	if strings.Contains(rd.logs.String(), "config reloaded") {
		t.Errorf("the certificate's renewal reloaded the config; want only the certificates read again")
	}

	// A new certificate whose key has not come yet: refused, logged with
	// the key file's name, the old pair still served.
	third := ca.Server(t)
	refusals := func() int {
		return strings.Count(rd.logs.String(), "certificate files not reloaded; the certificate in force stays")
	}
	before := refusals()
	replace(t, certFile, read(t, third.CertFile))
	waitFor(t, "the mismatched pair logged", func() bool { return refusals() > before })
	if logs := rd.logs.String(); !strings.Contains(logs[strings.LastIndex(logs, "certificate files not reloaded"):], keyFile) {
		t.Errorf("the mismatched pair's log line does not name the key file %s:\n%s", keyFile, logs)
	}
	if got, want := rd.served(t), second.TLS.Leaf.SerialNumber.String(); got != [3]string{want, want, want} {
		t.Errorf("with a certificate and a key that do not match, the listeners serve %v, want the pair in force (%s)", got, want)
	}
	// A reload (SIGHUP) meanwhile is refused, naming the key file.
	if err := rd.d.Reload(); err == nil || !strings.Contains(err.Error(), keyFile) {
		t.Errorf("Reload with a certificate and a key that do not match: %v, want an error naming %s", err, keyFile)
	}
	if got, want := rd.served(t), second.TLS.Leaf.SerialNumber.String(); got != [3]string{want, want, want} {
		t.Errorf("after a refused reload the listeners serve %v, want the pair in force (%s)", got, want)
	}
	replace(t, keyFile, read(t, third.KeyFile))
	rd.waitServed(t, "the pair served once the key came", third)
	if !strings.Contains(rd.logs.String(), "certificate reloaded") {
		t.Errorf("no log line says the certificate was reloaded:\n%s", rd.logs.String())
	}
}

// TestCertRotatedBySymlinkSwap: a Kubernetes Secret volume, whose files are
// links through ..data, a link swapped to a new directory on every update.
func TestCertRotatedBySymlinkSwap(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "server")
	version := func(name string, p tlstest.Pair) {
		os.Mkdir(filepath.Join(dir, name), 0o755)
		os.WriteFile(filepath.Join(dir, name, "tls.crt"), read(t, p.CertFile), 0o600)
		os.WriteFile(filepath.Join(dir, name, "tls.key"), read(t, p.KeyFile), 0o600)
	}
	first := ca.Server(t)
	version("..2026_11_27_08_00_00.1", first)
	os.Symlink("..2026_11_27_08_00_00.1", filepath.Join(dir, "..data"))
	os.Symlink("..data/tls.crt", filepath.Join(dir, "tls.crt"))
	os.Symlink("..data/tls.key", filepath.Join(dir, "tls.key"))
	rd := startRotateDaemon(t, filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	rd.ca = ca
	rd.waitServed(t, "the first certificate served", first)

	second := ca.Server(t)
	version("..2026_11_27_10_00_00.2", second)
	if err := os.Symlink("..2026_11_27_10_00_00.2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(filepath.Join(dir, "..2026_11_27_08_00_00.1"))
	rd.waitServed(t, "a certificate renewed by a ..data swap served without a reload", second)
}

// TestConfigRefusedOverCertsRetried: a config change that came while the
// certificate and key did not match (a deploy that updates the config and
// the certificate together) is refused, and applied once the pair is whole
// again, without another change to the config file.
func TestConfigRefusedOverCertsRetried(t *testing.T) {
	rd, ca, certFile, keyFile, _ := startRotatedFiles(t)

	second := ca.Server(t)
	replace(t, certFile, read(t, second.CertFile)) // its key comes later
	conf := string(read(t, rd.path))
	replace(t, rd.path, []byte(strings.Replace(conf, "rate: 5/m", "rate: 7/m", 1)))
	if r := rd.waitReload(); r.Err == nil || !strings.Contains(r.Err.Error(), keyFile) {
		t.Fatalf("a config change while the key does not match the certificate: %v, want refused naming %s", r.Err, keyFile)
	}
	replace(t, keyFile, read(t, second.KeyFile))
	rd.waitServed(t, "the new pair served", second)
	// The retry that applies it may follow other refused ones: the
	// certificate's own change, seen before the key came, retries too.
	// waitReload fails the test if none is applied.
	for r := rd.waitReload(); r.Err != nil; r = rd.waitReload() {
		if !strings.Contains(r.Err.Error(), keyFile) {
			t.Fatalf("the refused config tried again: %v, want applied (or refused over the key)", r.Err)
		}
	}
	if got := rd.d.Config().Rules[0].Rate; got != "7/m" {
		t.Errorf("rule rate in force %v, want the changed 7/m", got)
	}
}

// startRotatedFiles writes a first certificate of a new server CA, ca, and
// its key to tls.crt and tls.key in a directory of the test's, and starts
// the rotating daemon on them, its clients trusting ca.
func startRotatedFiles(t *testing.T) (rd *rotateDaemon, ca *tlstest.CA, certFile, keyFile string, first tlstest.Pair) {
	t.Helper()
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca = tlstest.NewCA(t, "server")
	first = ca.Server(t)
	for _, f := range [][2]string{{certFile, first.CertFile}, {keyFile, first.KeyFile}} {
		if err := os.WriteFile(f[0], read(t, f[1]), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	rd = startRotateDaemon(t, certFile, keyFile)
	rd.ca = ca
	return rd, ca, certFile, keyFile, first
}
