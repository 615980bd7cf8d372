package daemon

import (
	"bytes"
	"context"
	"crypto"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/descriptors"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/internal/tlsconf"
)

// This file takes the descriptors from an xDS management server
// (grpc.xds): server.RunXDS subscribes, applyXDS puts each config in
// force as a reload of the descriptor files does.

// usesXDS reports whether cfg's descriptors come from an xDS server.
func usesXDS(cfg *config.Config) bool { return cfg.GRPC != nil && cfg.GRPC.XDS != nil }

// errNoXDSConfig is /readyz's answer until the xDS server's first config
// is applied.
var errNoXDSConfig = errors.New("no descriptor config from the xDS server (grpc.xds.server) yet")

// openXDS reads grpc.xds.tls's files, so that a broken one stops the
// startup as a listener's does.
func (d *Daemon) openXDS(cfg *config.Config) error {
	if !usesXDS(cfg) {
		return nil
	}
	d.xds = true
	d.xdsRedial = make(chan struct{}, 1)
	c, err := loadXDSTLS(cfg)
	if err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	d.xdsTLS.Store(c)
	return nil
}

// loadXDSTLS reads the files of cfg's grpc.xds.tls: nil without one.
func loadXDSTLS(cfg *config.Config) (*tls.Config, error) {
	if !usesXDS(cfg) || cfg.GRPC.XDS.TLS == nil {
		return nil, nil
	}
	c, err := tlsconf.LoadClient(cfg.GRPC.XDS.TLS.ClientOptions())
	if err != nil {
		return nil, fmt.Errorf("grpc.xds.tls: %w", err)
	}
	return c, nil
}

// useXDSTLS puts in force c, grpc.xds.tls's files as a reload read them
// again (nil: none): when they changed (a rotated client certificate, a
// new CA bundle), the subscription is made again at once over a new
// connection that presents them. Called under reloadMu, once nothing can
// refuse the reload any more.
func (d *Daemon) useXDSTLS(c *tls.Config) {
	if c == nil || sameClientTLS(d.xdsTLS.Load(), c) {
		return
	}
	d.xdsTLS.Store(c)
	d.log.Info("grpc.xds.tls: files changed: subscribing again with them", "server", d.Config().GRPC.XDS.Server)
	select {
	case d.xdsRedial <- struct{}{}:
	default: // one is pending: it dials with the config stored last
	}
}

// sameClientTLS reports whether a and b, two loadings of one client TLS
// block (grpc.xds.tls, store.redis.tls), hold the same CAs, client certificate chain and key.
func sameClientTLS(a, b *tls.Config) bool {
	if a == nil || b == nil {
		return a == b
	}
	if (a.RootCAs == nil) != (b.RootCAs == nil) || a.RootCAs != nil && !a.RootCAs.Equal(b.RootCAs) {
		return false
	}
	if len(a.Certificates) != len(b.Certificates) {
		return false
	}
	for i := range a.Certificates {
		ca, cb := a.Certificates[i], b.Certificates[i]
		if !slices.EqualFunc(ca.Certificate, cb.Certificate, bytes.Equal) {
			return false
		}
		k, ok := ca.PrivateKey.(interface{ Equal(crypto.PrivateKey) bool })
		if !ok || !k.Equal(cb.PrivateKey) {
			return false
		}
	}
	return true
}

// runXDS subscribes, in a goroutine of wg until ctx is done, to the xDS
// server of grpc.xds (a block that needs a restart to change; its TLS
// files are read again by each reload).
func (d *Daemon) runXDS(ctx context.Context, wg *sync.WaitGroup) {
	x := d.Config().GRPC.XDS
	var tc func() *tls.Config
	if x.TLS != nil {
		tc = func() *tls.Config { return d.xdsTLS.Load().Clone() }
	}
	o := server.XDSOptions{
		Server:       x.Server,
		NodeID:       x.NodeID,
		NodeMetadata: x.NodeMetadata,
		TLS:          tc,
		Redial:       d.xdsRedial,
		Retry:        x.Retry,
		Apply:        d.applyXDS,
		Epoch:        d.xdsEpoch.Load,
		Unread:       func(string, error) { d.metrics.Reload(false) },
		Logger:       d.log,
	}
	wg.Go(func() {
		if err := server.RunXDS(ctx, o); err != nil {
			d.log.Error("xDS subscription not made: no descriptors", "err", err)
		}
	})
}

// applyXDS puts in force the descriptor configs of one xDS response, all
// of them or none: checked as files are (the problems name the
// RateLimitConfig and key), and refused, the descriptors in force
// staying, as a reload of the files is; counted as a reload either way.
func (d *Daemon) applyXDS(version string, docs []descriptors.Doc) error {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	if d.stopping.Load() {
		return ErrShuttingDown
	}
	old := d.cur.Load()
	set, err := descriptors.FromDocs(docs, descriptors.LoadOptions{MergeDomains: old.cfg.GRPC.MergeDomains})
	if err != nil {
		d.metrics.Reload(false)
		return err
	}
	if d.xdsApplied.Load() && set.Digest() == old.descs.Digest() {
		d.xdsDocs = docs
		return nil
	}
	if err := d.useDescriptors(old, set); err != nil {
		d.metrics.Reload(false)
		return err
	}
	d.xdsDocs = docs
	d.xdsApplied.Store(true)
	d.metrics.Reload(true)
	d.log.Info("descriptors applied from the xDS server", "version", version, "domains", set.Domains(), "rules", set.Rules())
	return nil
}

// ready is /readyz's question: with grpc.xds, a descriptor config from
// the xDS server is in force; and the store answers.
func (d *Daemon) ready(ctx context.Context) error {
	if d.xds && !d.xdsApplied.Load() {
		return errNoXDSConfig
	}
	if d.ping != nil {
		return d.ping(ctx)
	}
	return nil
}
