//go:build linux

package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// clientCAReplacedInReload: api.tls.client_ca, a bundle of CA b, is
// removed and created again as the bundle of CAs a and c by a writer
// that writes a's certificate and pauses, after a reload that reads the
// certificates with the config (made by reload) checked that none of the
// files it names is being written and before it reads them. The half
// bundle parses (a alone), and is wrong: it is never put in force, nor
// is the config the reload read (with rules rules); once the writer has
// closed the file, the reload is made, with the whole bundle, and
// nothing is counted as a failure.
func clientCAReplacedInReload(t *testing.T, rules int, reload func(td *testDaemon)) {
	r := replaceAfterCheck(t)
	a, b, c := tlstest.NewCA(t, "clients-a"), tlstest.NewCA(t, "clients-b"), tlstest.NewCA(t, "clients-c")
	srv := b.Server(t)
	dir := t.TempDir()
	caFile := filepath.Join(dir, "clients.pem")
	mustWrite(t, caFile, bundle(t, b))
	td, inForce := startClientCADaemon(t, srv, caFile)
	r.what, r.path, r.half = "named", caFile, bundle(t, a)
	close(r.arm)

	reload(td)
	f := r.writer(t)
	td.lookUntil("the bundle replaced after the reload's check, half written, its writer at work", func(l string) bool {
		return strings.Contains(l, "changed while the reload read it") || strings.Contains(l, "tls: certificate reloaded")
	})
	if !inForce().Equal(pool(b)) {
		t.Fatal("client CAs in force changed by a reload that read the bundle half written: want b's, as before (the half never in force)")
	}
	if got := len(td.d.Config().Rules); got != 1 {
		t.Fatalf("rules in force: %d, want the 1 of before (a reload that read half a bundle applies nothing)", got)
	}

	writeRest(t, f, bundle(t, c))
	td.appliedWithoutFailure("the bundle written and closed", func() bool {
		return inForce().Equal(pool(a, c)) && len(td.d.Config().Rules) == rules
	})
	reloadedOnce(t, td.logs, "client CAs", "tls: certificate reloaded")
}

// clientCAEdited is startClientCADaemon's config with a second rule.
func clientCAEdited(srv tlstest.Pair, caFile string) string {
	return "listen: 127.0.0.1:0\napi:\n  tls: {cert: " + srv.CertFile + ", key: " + srv.KeyFile + ", client_ca: " + caFile + "}\n" +
		"rules:\n  - {name: all, rate: 5/m}\n  - {name: more, rate: 7/m}\n"
}

// TestSIGHUPClientCABundleReplacedAfterCheck: clientCAReplacedInReload,
// for a SIGHUP (Reload) of the config unchanged: it reads the config
// file as it is, but the files it names are checked as any reload's.
func TestSIGHUPClientCABundleReplacedAfterCheck(t *testing.T) {
	clientCAReplacedInReload(t, 1, func(td *testDaemon) {
		if err := td.d.Reload(); err != nil {
			t.Fatalf("SIGHUP's reload: %v, want it put off, not refused", err)
		}
	})
}

// TestConfigReloadClientCABundleReplacedAfterCheck: clientCAReplacedInReload,
// for a reload of an edited config file.
func TestConfigReloadClientCABundleReplacedAfterCheck(t *testing.T) {
	clientCAReplacedInReload(t, 2, func(td *testDaemon) {
		o := td.d.tls[0].Options()
		replaceFile(t, td.path, clientCAEdited(tlstest.Pair{CertFile: o.Cert, KeyFile: o.Key}, o.ClientCA))
	})
}

// TestSIGHUPWaitsForCertWriter: a SIGHUP while api.tls.client_ca is being
// written in place (truncated, half of the new bundle written, its writer
// at work) puts nothing in force: the half bundle parses (a alone) and is
// wrong. It says so, and once the writer has closed the file the whole
// bundle is in force.
func TestSIGHUPWaitsForCertWriter(t *testing.T) {
	a, b, c := tlstest.NewCA(t, "clients-a"), tlstest.NewCA(t, "clients-b"), tlstest.NewCA(t, "clients-c")
	dir := t.TempDir()
	caFile := filepath.Join(dir, "clients.pem")
	mustWrite(t, caFile, bundle(t, b))
	td, inForce := startClientCADaemon(t, b.Server(t), caFile)
	f, err := os.OpenFile(caFile, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(bundle(t, a)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the bundle seen being written", func() bool { w, _ := td.d.certWatcher.writing(); return w })

	if err := td.d.Reload(); err != nil {
		t.Fatalf("SIGHUP while the bundle is being written: %v, want it put off, not refused", err)
	}
	if !inForce().Equal(pool(b)) {
		t.Fatal("client CAs in force changed by a SIGHUP while the bundle was half written: want b's, as before (the half never in force)")
	}
	if l := td.logs.String(); !strings.Contains(l, "a file the config names is being written in place") {
		t.Errorf("the SIGHUP put off does not say why:\n%s", l)
	}

	writeRest(t, f, bundle(t, c))
	waitFor(t, "the whole bundle in force once its writer closed it", func() bool { return inForce().Equal(pool(a, c)) })
	if got := td.metric("sluice_config_reloads_total", "result", "failure"); got != 0 {
		t.Errorf("%v reload failures counted, want 0 (the half was never read)", got)
	}
}

// TestSIGHUPRedisCABundleReplacedAfterCheck: as
// TestSIGHUPClientCABundleReplacedAfterCheck, for store.redis.tls.ca:
// the bundle of Redis's CA s is replaced by x's alone, the first half of
// the bundle of x and s, after a SIGHUP's check of the files the config
// names; the half would fail every connection to Redis dialled with it,
// and is never put in force; the whole bundle is once its writer has
// closed the file, and decisions are made on Redis with it.
func TestSIGHUPRedisCABundleReplacedAfterCheck(t *testing.T) {
	r := replaceAfterCheck(t)
	s, x := tlstest.NewCA(t, "redis-server"), tlstest.NewCA(t, "other")
	srv := s.Server(t)
	rs := redistest.StartTLSServer(t, srv.CertFile, srv.KeyFile)
	caFile := filepath.Join(t.TempDir(), "redis-ca.pem")
	mustWrite(t, caFile, bundle(t, s))
	td := startDaemon(t, redisTLSYAML([]string{rs.TLSAddr}, "", "{ca: "+caFile+"}", "1000/h"))
	before := td.d.redisTLS.Load()
	r.what, r.path, r.half = "named", caFile, bundle(t, x)
	close(r.arm)

	if err := td.d.Reload(); err != nil {
		t.Fatalf("SIGHUP's reload: %v, want it put off, not refused", err)
	}
	f := r.writer(t)
	if td.d.redisTLS.Load() != before {
		t.Fatal("store.redis.tls in force changed by a SIGHUP that read its CA bundle half written: the half is in force")
	}
	if l := td.logs.String(); !strings.Contains(l, "changed while the reload read it") {
		t.Errorf("the SIGHUP put off does not say why:\n%s", l)
	}

	wholeRedisBundle(t, td, f, rs.Addr, x, s)
}
