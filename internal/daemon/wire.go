package daemon

import (
	"crypto/sha256"
	"fmt"
	"net/url"
	"reflect"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/descriptors"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/hotkeys"
	"github.com/sluicehq/sluice/internal/proxy"
	"github.com/sluicehq/sluice/internal/server"
)

// engine returns the engine in force; the proxy and the decision API call
// it once per request.
func (d *Daemon) engine() *engine.Engine { return d.cur.Load().eng }

// build makes the generation of cfg over the daemon's store and metrics: a
// new engine with cfg's rules, the decision API, and the proxy. The proxy
// of old (the generation in force, nil at startup) is kept when its
// settings are unchanged, so its upstream connections survive a reload of
// the rules.
func (d *Daemon) build(cfg *config.Config, old *generation) (*generation, error) {
	set, err := cfg.RuleSet()
	if err != nil {
		return nil, err
	}
	eng, err := engine.New(d.engineOptions(engine.Options{
		Store:   d.store,
		Rules:   set,
		OnError: cfg.Store.OnError,
		Metrics: d.metrics,
		Logger:  d.log,
		Now:     d.opts.Now,
	}, cfg))
	if err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	gen := &generation{cfg: cfg, rules: set, eng: eng}
	switch {
	case usesXDS(cfg) && old != nil:
		gen.descs = old.descs // the xDS server's, in force
		if d.xdsDocs != nil && cfg.GRPC.MergeDomains != old.cfg.GRPC.MergeDomains {
			// Read again as the files would be: turned off over two
			// configs of one domain, the reload is refused.
			if gen.descs, err = descriptors.FromDocs(d.xdsDocs, descriptors.LoadOptions{MergeDomains: cfg.GRPC.MergeDomains}); err != nil {
				return nil, err
			}
		}
	case usesXDS(cfg):
		gen.descs = nil // none until the server's first config: the service answers UNAVAILABLE
	default:
		if gen.descs, err = LoadDescriptors(cfg); err != nil {
			return nil, err
		}
	}
	if gen.rls, err = d.newRLS(cfg); err != nil {
		return nil, err
	}
	ips := cfg.ClientIP.Resolver()
	so := server.Options{
		Engine:       d.engine,
		ClientIP:     ips,
		DenyStatus:   cfg.ForwardAuth.DenyStatus,
		Ready:        d.ready,
		Gatherer:     d.reg,
		KeyMetrics:   []string{hotkeys.KeyRateMetric},
		KeySeries:    d.metrics.ClientSeries,
		MaxBodyBytes: cfg.Limits.MaxBodyBytes,
		Logger:       d.log,
		Now:          d.opts.Now,
		Envoy:        gen.rls,
		HotKeys:      d.hot,
	}
	if d.deferq != nil {
		so.Deferred = d.deferq
	}
	if cfg.API.TokenFile != "" {
		// Read on every reload: a new token takes effect with it.
		if so.Token, err = config.ReadToken(cfg.API.TokenFile); err != nil {
			return nil, fmt.Errorf("daemon: api.token_file: %s: %w", cfg.API.TokenFile, err)
		}
		gen.token = sha256.Sum256(so.Token)
	}
	gen.api, err = server.New(so)
	if err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	if cfg.Proxy == nil {
		return gen, nil
	}
	if old != nil && old.proxy != nil && sameProxy(old.cfg, cfg) {
		gen.proxy = old.proxy
		return gen, nil
	}
	u, err := url.Parse(cfg.Proxy.Upstream)
	if err != nil {
		return nil, fmt.Errorf("daemon: proxy.upstream: %w", err)
	}
	gen.proxy, err = proxy.New(proxy.Options{
		Upstream:              u,
		Engine:                d.engine,
		ClientIP:              ips,
		DialTimeout:           cfg.Proxy.DialTimeout,
		ResponseHeaderTimeout: cfg.Proxy.ResponseHeaderTimeout,
		TunnelIdleTimeout:     cfg.Proxy.TunnelIdleTimeout,
		Logger:                d.log,
		Defer:                 d.deferq,
	})
	if err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	return gen, nil
}

// sameProxy reports whether the proxy built for a can serve b unchanged.
func sameProxy(a, b *config.Config) bool {
	return a.Proxy != nil && b.Proxy != nil &&
		a.Proxy.Upstream == b.Proxy.Upstream &&
		a.Proxy.DialTimeout == b.Proxy.DialTimeout &&
		a.Proxy.ResponseHeaderTimeout == b.Proxy.ResponseHeaderTimeout &&
		a.Proxy.TunnelIdleTimeout == b.Proxy.TunnelIdleTimeout &&
		reflect.DeepEqual(a.ClientIP, b.ClientIP)
}
