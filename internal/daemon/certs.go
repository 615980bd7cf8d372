package daemon

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"time"

	"github.com/sluicehq/sluice/internal/tlsconf"
)

// listenerTLS is the TLS of the listener named name (api, proxy, grpc).
type listenerTLS struct {
	name string
	*tlsconf.Reloadable
}

// watchCerts starts watching the certificate, key and client CA files of
// every listener with TLS, grpc.xds.tls's and store.redis.tls's, so that
// a certificate renewed in place (cert-manager, Vault agent, a Kubernetes
// Secret volume's ..data swap) is served, or presented to the xDS server
// or to Redis, without a reload. Not fatal: a reload still reads them.
func (d *Daemon) watchCerts() {
	var paths []string
	seen := map[string]bool{}
	add := func(ps ...string) {
		for _, p := range ps {
			if p != "" && !seen[p] {
				seen[p] = true
				paths = append(paths, p)
			}
		}
	}
	for _, l := range d.tls {
		o := l.Options()
		add(o.Cert, o.Key, o.ClientCA)
	}
	add(d.xdsTLSPaths()...)
	add(d.redisTLSPaths()...)
	if len(paths) == 0 {
		return
	}
	var err error
	if d.certWatcher, err = newConfigWatcher(paths...); err != nil {
		d.log.Error("tls: certificate files not watched; reload with SIGHUP to serve a renewed certificate", "err", err)
		return
	}
	d.certWatcher.watchWrites()
}

// certsChanged follows a change to the listeners' TLS files: a config
// change refused since (over these very files, maybe: a deploy that
// updates the config and the certificate together) is tried again first,
// and applied brings the files with it; then the files are read again.
func (d *Daemon) certsChanged() {
	if d.reloader != nil {
		d.reloader.retryFailed()
	}
	d.reloadCerts()
}

// reloadCerts reads the listeners' TLS files again after a change to them.
// Each listener is on its own: one whose files now make another
// certificate or client CA serves it from its next handshake; one whose
// files do not load (a certificate whose key is not written yet) keeps
// what it serves, and the error, naming the file, is logged.
// The next change to the files tries again. What is read is checked to
// be the files whole (certsRead): never half a CA bundle or chain.
//
// A file missing (deleted before it is written again, a Secret's ..data
// swap to a version without it) is waited for as the config file is: one
// warning, and the listener's files are read when it is back.
func (d *Daemon) reloadCerts() {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	for _, l := range d.tls {
		if p := missingOf(l.Options().Cert, l.Options().Key, l.Options().ClientCA); p != "" {
			if !d.certMissing[p] {
				d.log.Warn("tls: certificate file is missing: the certificate in force stays; it is read again when the file is back", "listener", l.name, "file", p)
				if d.certMissing == nil {
					d.certMissing = map[string]bool{}
				}
				d.certMissing[p] = true
			}
			continue
		}
		var cfg *tls.Config
		var err error
		if !d.certsRead("listener", l.name, func() { cfg, err = l.Load() }) {
			continue
		}
		for _, p := range []string{l.Options().Cert, l.Options().Key, l.Options().ClientCA} {
			delete(d.certMissing, p)
		}
		changed := false
		if err == nil {
			changed, err = l.Store(cfg)
		}
		d.certsInForce(l, changed, err)
	}
	d.reloadXDSTLS()
	d.reloadRedisTLS()
}

// xdsTLSPaths are the files of grpc.xds.tls (some may be ""); none
// without it.
func (d *Daemon) xdsTLSPaths() []string {
	cfg := d.Config()
	if !usesXDS(cfg) || cfg.GRPC.XDS.TLS == nil {
		return nil
	}
	t := cfg.GRPC.XDS.TLS
	return []string{t.CA, t.Cert, t.Key}
}

// reloadXDSTLS reads grpc.xds.tls's files again after a change to them,
// as reloadCerts does a listener's: files that make another client
// certificate or CA bundle are used by a subscription made again at once
// (useXDSTLS); files that do not load are logged, naming the file, and
// the subscription in force carries on; a missing one is waited for.
// Called under reloadMu.
func (d *Daemon) reloadXDSTLS() {
	paths := d.xdsTLSPaths()
	if len(paths) == 0 {
		return
	}
	var c *tls.Config
	var err error
	if !d.clientFilesRead("grpc.xds.tls", "the subscription in force carries on", paths, func() { c, err = loadXDSTLS(d.Config()) }) {
		return
	}
	if err != nil {
		d.log.Error("grpc.xds.tls: files not reloaded; the subscription in force carries on", "err", err)
		return
	}
	d.useXDSTLS(c)
}

// clientFilesRead reads paths, the files of a client TLS block (key),
// with read, checked (certsRead), and reports whether it did: not while
// one is missing, nor while they are being written. The first missing
// one is logged once, with what stays in force meanwhile (kept), until it
// is back. Called under reloadMu.
func (d *Daemon) clientFilesRead(key, kept string, paths []string, read func()) bool {
	if p := missingOf(paths...); p != "" {
		if !d.certMissing[p] {
			d.log.Warn(key+": file is missing: "+kept+"; it is read again when the file is back", "file", p)
			if d.certMissing == nil {
				d.certMissing = map[string]bool{}
			}
			d.certMissing[p] = true
		}
		return false
	}
	if !d.certsRead("block", key, read) {
		return false
	}
	for _, p := range paths {
		delete(d.certMissing, p)
	}
	return true
}

// certsRead reads the TLS files of the listener or block named with
// read, checked as a reload reads the config (configWatcher.checkedRead
// over the certificate watcher's files), and reports whether what read
// read is the files whole; if not, what is in force stays, and the files
// are read again at their next change, which the watcher reports (a
// writer closing the file, a rename). A file being written in place (one
// missing when the watcher found none being written may be back since,
// its creator at work, half a certificate in) is logged each time; files
// that keep changing while read (replaced after the check, their writer
// at work, with half a CA bundle or chain written: it parses) once until
// they are read whole. Called under reloadMu, once the files are there.
func (d *Daemon) certsRead(kind, name string, read func()) bool {
	switch d.certWatcher.checkedRead(kind+" "+name, read) {
	case readWriting:
		d.log.Info("tls: certificate file is being written in place: it is read when its writer has closed it", kind, name)
		return false
	case readChanging:
		if !d.certsChanging[name] {
			d.log.Info("tls: certificate files keep changing while they are read: what is in force stays; they are read at their next change", kind, name)
			if d.certsChanging == nil {
				d.certsChanging = map[string]bool{}
			}
			d.certsChanging[name] = true
		}
		return false
	}
	delete(d.certsChanging, name)
	return true
}

// missingOf returns the first of paths (empty ones aside) that is
// missing, or "".
func missingOf(paths ...string) string {
	for _, p := range paths {
		if p != "" && missing(p) {
			return p
		}
	}
	return ""
}

// certsInForce logs what l serves after a reading of its files: the error
// of files that did not load, or of a certificate held until it is valid
// or not served because it has expired (its client CA is in force either
// way), or the certificate now served when it changed.
func (d *Daemon) certsInForce(l listenerTLS, changed bool, err error) {
	var early *tlsconf.NotYetValidError
	var expired *tlsconf.ExpiredError
	switch {
	case errors.As(err, &early):
		d.log.Error("tls: the new certificate is not valid yet; the certificate in force is served until it is",
			"listener", l.name, "cert", l.Options().Cert, "not_before", early.NotBefore.UTC().Format(time.RFC3339), "err", err)
		if changed {
			d.log.Info("tls: client CA reloaded", "listener", l.name, "client_ca", l.Options().ClientCA)
		}
	case errors.As(err, &expired):
		d.log.Error("tls: the new certificate has expired; the certificate in force is served while it is valid",
			"listener", l.name, "cert", l.Options().Cert, "not_after", expired.NotAfter.UTC().Format(time.RFC3339), "err", err)
		if changed {
			d.log.Info("tls: client CA reloaded", "listener", l.name, "client_ca", l.Options().ClientCA)
		}
	case err != nil:
		d.log.Error("tls: certificate files not reloaded; the certificate in force stays", "listener", l.name, "err", err)
	case changed:
		d.logCert(l, "tls: certificate reloaded")
	}
}

// addTLS adds the TLS r of the listener named name to those the daemon
// reloads, and has a certificate held until it is valid logged when it
// goes in force.
func (d *Daemon) addTLS(name string, r *tlsconf.Reloadable) {
	l := listenerTLS{name, r}
	r.WhenInForce(func(*x509.Certificate) { d.logCert(l, "tls: certificate reloaded, valid from now") })
	d.tls = append(d.tls, l)
}

// logCert logs msg with the certificate l serves, and a warning while that
// certificate is expired.
func (d *Daemon) logCert(l listenerTLS, msg string) {
	leaf := l.Leaf()
	if leaf == nil {
		return
	}
	notAfter := leaf.NotAfter.UTC().Format(time.RFC3339)
	d.log.Info(msg, "listener", l.name, "cert", l.Options().Cert, "serial", leaf.SerialNumber.String(), "not_after", notAfter)
	if now := time.Now(); now.After(leaf.NotAfter) {
		d.log.Warn("tls: the certificate served has expired; clients will refuse it", "listener", l.name, "cert", l.Options().Cert, "not_after", notAfter)
	} else if now.Before(leaf.NotBefore) {
		d.log.Warn("tls: the certificate served is not valid yet; clients will refuse it until it is", "listener", l.name, "cert", l.Options().Cert,
			"not_before", leaf.NotBefore.UTC().Format(time.RFC3339))
	}
}
