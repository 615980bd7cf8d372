package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/h1"
	"github.com/sluicehq/sluice/internal/listener"
)

// Serving and shutting down: Run, its graceful shutdown, and Close.

// Run serves until ctx is done, then shuts down gracefully: the listeners
// close at once, in-flight requests get up to the config's
// shutdown_timeout to finish, and the store is closed. It returns nil after
// a clean shutdown, or the first error that stopped a server. With
// Options.ConfigPath it also watches the file and reloads on change.
func (d *Daemon) Run(ctx context.Context) error {
	if !d.ran.CompareAndSwap(false, true) {
		return errors.New("daemon: Run called twice")
	}
	cfg := d.Config()
	d.log.Info("decision API listening", "addr", scheme(d.Addrs().API, cfg.API.TLS)+d.Addrs().API)
	for _, w := range cfg.UnixWarnings() {
		d.log.Warn(strings.TrimPrefix(w.Msg, "warning: "), "key", w.Key)
	}
	if d.proxySrv != nil {
		d.log.Info("proxy listening", "addr", scheme(d.Addrs().Proxy, cfg.Proxy.TLS)+d.Addrs().Proxy, "upstream", cfg.Proxy.Upstream)
	}

	errc := make(chan error, 3)
	serve := func(name string, srv *http.Server, ln net.Listener) {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("daemon: %s: %w", name, err)
		}
	}
	var wg sync.WaitGroup
	serveFront := func(name string, f *h1.Server, ln net.Listener) {
		if err := f.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("daemon: %s: %w", name, err)
		}
	}
	if d.apiFront != nil {
		wg.Go(func() { serveFront("decision API", d.apiFront, d.apiServe) })
	} else {
		wg.Go(func() { serve("decision API", d.apiSrv, d.apiServe) })
	}
	switch {
	case d.proxyFront != nil:
		wg.Go(func() { serveFront("proxy", d.proxyFront, d.proxyServe) })
	case d.proxySrv != nil:
		wg.Go(func() { serve("proxy", d.proxySrv, d.proxyServe) })
	}
	if d.grpcSrv != nil {
		d.log.Info("Envoy rate limit service listening", "addr", d.Addrs().GRPC, "domains", d.descriptorSet().Domains())
		var grpcCtx context.Context
		grpcCtx, d.stopGRPC = context.WithCancel(context.Background())
		d.grpcDone = make(chan error, 1)
		go func() {
			err := d.grpcSrv.Serve(grpcCtx, d.grpcLn)
			d.grpcDone <- err
			if err != nil {
				errc <- fmt.Errorf("daemon: gRPC: %w", err)
			}
		}()
	}

	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	if d.sweep != nil {
		wg.Go(func() { onTick(watchCtx, SweepInterval, func(now time.Time) { d.sweep(now) }) })
	}
	if d.watchRedis != nil {
		wg.Go(func() { onTick(watchCtx, RedisWatchInterval, d.watchRedis) })
	}
	if d.watcher != nil {
		defer d.watcher.Close()
		d.watchConfig(watchCtx, &wg)
	}
	if d.descWatcher != nil {
		defer d.descWatcher.Close()
		d.watchDescriptors(watchCtx, &wg)
	}
	if d.xds {
		d.runXDS(watchCtx, &wg)
	}

	if d.tokenWatcher != nil {
		defer d.tokenWatcher.Close()
		d.runWatch(watchCtx, &wg, d.tokenWatcher, make(chan struct{}, 1), func() {}, d.tokenChanged)
	}
	if d.certWatcher != nil {
		defer d.certWatcher.Close()
		// A certificate chain or CA bundle written in place is not read
		// half-written: its first certificates would load.
		d.runWatch(watchCtx, &wg, d.certWatcher, make(chan struct{}, 1), func() {}, d.certsChanged)
	}
	for _, l := range d.tls {
		d.logCert(l, "tls: serving certificate")
	}

	featCtx, stopFeatures := context.WithCancel(ctx)
	defer stopFeatures()
	waitFeatures := d.runFeatures(featCtx)

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	stopWatch()
	stopFeatures()
	waitFeatures()
	if err := d.shutdown(); err != nil && runErr == nil {
		runErr = err
	}
	wg.Wait()
	return runErr
}

// shutdown stops accepting, waits for in-flight requests up to the
// shutdown timeout, then closes the store. Requests still running at the
// deadline have their connections closed; that is logged, not returned:
// the shutdown itself succeeded. The error is the store's, if closing it
// fails.
func (d *Daemon) shutdown() error {
	d.stopping.Store(true)
	timeout := d.Config().ShutdownTimeout
	if timeout <= 0 {
		timeout = DefaultShutdownTimeout
	}
	d.log.Info("shutting down: no new connections; waiting for requests in flight", "shutdown_timeout", timeout)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var wg sync.WaitGroup
	if d.stopGRPC != nil {
		// Health turns NOT_SERVING, calls in flight finish (bounded by
		// the shutdown timeout, as the HTTP requests), then the store
		// can close.
		d.grpcSrv.SetStopGrace(timeout)
		d.stopGRPC()
		wg.Go(func() { <-d.grpcDone })
	}
	type server interface {
		Shutdown(context.Context) error
		Close() error
	}
	var servers []server
	if d.apiFront != nil {
		servers = append(servers, d.apiFront) // and apiSrv under it
	} else {
		servers = append(servers, d.apiSrv)
	}
	switch {
	case d.proxyFront != nil:
		servers = append(servers, d.proxyFront) // and proxySrv under it
	case d.proxySrv != nil:
		servers = append(servers, d.proxySrv)
	}
	for _, srv := range servers {
		wg.Go(func() {
			if err := srv.Shutdown(ctx); err != nil {
				d.log.Warn("requests still in flight at shutdown_timeout: closing their connections",
					"shutdown_timeout", timeout, "err", err)
				srv.Close()
			}
		})
	}
	wg.Wait()
	d.closeConns()
	if err := d.closeStore(); err != nil {
		err = fmt.Errorf("daemon: close store: %w", err)
		d.log.Error("shutdown", "err", err)
		return err
	}
	d.log.Info("shut down")
	return nil
}

// closeConns closes, once the servers have shut down, the connections
// they leave open: the tunnels of upgraded connections (WebSocket), which
// a shutdown does not wait for, and the proxy's idle upstream
// connections (an upstream that keeps them open would hold them, and the
// daemon's descriptors, after Run has returned). Taking reloadMu, it also
// waits for a reload applying since before the shutdown began: that one
// ends, whole, before the store closes.
func (d *Daemon) closeConns() {
	for _, ln := range []*listener.Listener{d.apiLn, d.proxyLn} {
		if ln != nil {
			ln.CloseHijacked()
		}
	}
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	if c, ok := d.cur.Load().proxy.(interface{ Close() }); ok {
		c.Close()
	}
}

// Close releases the listeners and the store of a daemon that will not
// Run. After Run it does nothing.
func (d *Daemon) Close() error {
	d.stopping.Store(true)
	if d.ran.Swap(true) {
		return nil
	}
	lns := []net.Listener{d.grpcLn}
	for _, ln := range []*listener.Listener{d.apiLn, d.proxyLn} {
		if ln != nil {
			lns = append(lns, ln)
		}
	}
	for _, ln := range lns {
		if ln != nil {
			ln.Close()
		}
	}
	if d.watcher != nil {
		d.watcher.Close()
	}
	if d.descWatcher != nil {
		d.descWatcher.Close()
	}
	if d.certWatcher != nil {
		d.certWatcher.Close()
	}
	if d.tokenWatcher != nil {
		d.tokenWatcher.Close()
	}
	return d.closeStore()
}
