package daemon

import (
	"crypto/tls"
	"fmt"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/tlsconf"
)

// This file reads store.redis.tls's files again when they change, or at a
// reload, as certs.go does the listeners' and xds.go grpc.xds.tls's: every
// connection to Redis dialled after (a reconnection, a new Cluster node, a
// failover's new master) presents the client certificate and verifies
// Redis's against the CAs read last (redisstore.Options.TLSFunc); the
// connections open keep theirs. A rotated certificate is thus in use
// before the old one expires, without a restart.

// usesRedisTLS reports whether cfg connects to Redis over TLS.
func usesRedisTLS(cfg *config.Config) bool {
	return cfg.Store.Type == config.StoreRedis && cfg.Store.Redis.TLS.On
}

// loadRedisTLS reads the files of cfg's store.redis.tls: nil without TLS.
func loadRedisTLS(cfg *config.Config) (*tls.Config, error) {
	if !usesRedisTLS(cfg) {
		return nil, nil
	}
	c, err := tlsconf.LoadClient(cfg.Store.Redis.TLS.ClientOptions())
	if err != nil {
		return nil, fmt.Errorf("store.redis.tls: %w", err)
	}
	return c, nil
}

// redisTLSPaths are the files of store.redis.tls (some may be ""); none
// without it.
func (d *Daemon) redisTLSPaths() []string {
	cfg := d.Config()
	if !usesRedisTLS(cfg) {
		return nil
	}
	t := cfg.Store.Redis.TLS
	return []string{t.CA, t.Cert, t.Key}
}

// useRedisTLS puts in force c, store.redis.tls's files as read again (nil:
// none): the connections to Redis dialled from now on use it. Called under
// reloadMu, once nothing can refuse the reload any more.
func (d *Daemon) useRedisTLS(c *tls.Config) {
	if c == nil || sameClientTLS(d.redisTLS.Load(), c) {
		return
	}
	d.redisTLS.Store(c)
	d.log.Info("store.redis.tls: files changed: new connections to Redis use them (those open keep theirs)")
}

// reloadRedisTLS reads store.redis.tls's files again after a change to
// them: files that make another client certificate or CA bundle are used
// by the connections dialled from then on; files that do not load are
// logged, naming the file, and the ones in force stay, whole; a missing
// one is waited for. Called under reloadMu.
func (d *Daemon) reloadRedisTLS() {
	paths := d.redisTLSPaths()
	if len(paths) == 0 || d.redisTLS.Load() == nil {
		return
	}
	var c *tls.Config
	var err error
	if !d.clientFilesRead("store.redis.tls", "new connections to Redis keep the files read before", paths, func() { c, err = loadRedisTLS(d.Config()) }) {
		return
	}
	if err != nil {
		d.log.Error("store.redis.tls: files not reloaded; new connections to Redis keep the files read before", "err", err)
		return
	}
	d.useRedisTLS(c)
}
