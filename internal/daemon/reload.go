package daemon

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/redisstore"
)

// ReloadResult is the outcome of one reload attempt, as passed to
// Options.OnReload.
type ReloadResult struct {
	// Unchanged reports that the file's content was the same as at the
	// last attempt, so nothing was done (and nothing counted). Only
	// watcher-triggered reloads skip unchanged content; Reload (SIGHUP)
	// always applies.
	Unchanged bool
	// Writing reports that the file was not read because a process that
	// wrote to it in place still has it open: what it holds may be half
	// of what is being written. The reload is tried again when the
	// writer closes it (or after maxWriteWait). The reloads of the watcher
	// wait, and so do those a change to a file the config names (a
	// certificate, the token, a descriptor file) triggers; Reload
	// (SIGHUP) reads the file as it is. The same, for every reload,
	// Reload's too, while one of the files the config names is being
	// written in place, or when one was replaced or written to while the
	// reload read it: the reload is made once its writer has closed it.
	Writing bool
	// Missing reports that the file (for a reload of the descriptors, a
	// path grpc.config names) was not there (as while a tool
	// replaces it by deleting it first, or a ConfigMap's ..data swap to a
	// version without it): nothing was read, refused or counted, the
	// running config stays, and the file is reloaded when it is back.
	// Reloads wait for it but Reload (SIGHUP), which refuses a missing
	// file.
	Missing bool
	// Err is why the new config was refused (the old one stays), or nil
	// when it was applied.
	Err error
}

// ErrShuttingDown is the error of a reload asked for once the daemon's
// shutdown has begun, or after Close: the config in force stays to the end
// (the requests still in flight finish under it). A reload already
// applying when the shutdown begins is completed first.
var ErrShuttingDown = errors.New("daemon: shutting down: config not reloaded")

// Reload rereads Options.ConfigPath and applies it, even if its content is
// unchanged (SIGHUP). A config that is invalid, uses an unsupported
// feature, or changes a key that needs a restart is refused: the error says
// why, it is logged and counted, and the config in force stays. The files
// it names (certificates, the token, descriptor files) are checked as a
// watcher's reload checks them: while one is being written in place, or
// when one changed while it was read (half a CA bundle may parse), nothing
// is applied and the reload is made once its writer has closed it (it
// returns nil: put off, not refused). Once the shutdown has begun it
// returns ErrShuttingDown, and does nothing else.
func (d *Daemon) Reload() error {
	if d.reloader == nil {
		return errors.New("daemon: reload: no config file (running the built-in example)")
	}
	if d.stopping.Load() {
		return ErrShuttingDown
	}
	return d.reloader.reload(true).Err
}

// errNamedMoved refuses to apply a config whose named files changed while
// apply read them (see apply): the reload waits for the next change.
var errNamedMoved = errors.New("daemon: reload: a file the config names changed while it was read")

// apply parses data as the new config and, if it is valid and changes
// nothing that needs a restart, swaps it in. The store is kept, so
// counters of rules whose fingerprint is unchanged carry on. On Redis it
// returns once what the old fleet rules held locally has been handed
// back, after the decisions still running on them have ended.
//
// still, unless nil, is asked once the files the config names are read
// and before anything is put in force: false (one was replaced or
// written to since the reload checked them) refuses it, errNamedMoved,
// as what was read may be half of a file.
func (d *Daemon) apply(data []byte, still func() bool) error {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	if d.stopping.Load() {
		return ErrShuttingDown
	}
	cfg, err := config.Parse(d.opts.ConfigPath, data)
	if err != nil {
		return err
	}
	if err := d.opts.Overrides.Apply(cfg); err != nil {
		return fmt.Errorf("daemon: reload %s: %w", d.opts.ConfigPath, err)
	}
	if err := config.Unsupported(cfg); err != nil {
		return err
	}
	old := d.cur.Load()
	if keys := restartOnly(old.cfg, cfg); len(keys) > 0 {
		return restartError(d.opts.ConfigPath, keys, cfg)
	}
	// The listeners' certificates, keys and client CAs are read again (the
	// tls: blocks themselves need a restart to change): a renewed
	// certificate takes effect with the reload, a broken one refuses it.
	if err := cfg.TLSProblems(); err != nil {
		return err
	}
	if checkedHook != nil {
		checkedHook("named")
	}
	certs := make([]*tls.Config, len(d.tls))
	for i, r := range d.tls {
		if certs[i], err = r.Load(); err != nil {
			return fmt.Errorf("daemon: reload: %w", err)
		}
	}
	// grpc.xds.tls's files too: a rotated client certificate is
	// presented from the subscription made again once it is applied.
	xdsTLS, err := loadXDSTLS(cfg)
	if err != nil {
		return fmt.Errorf("daemon: reload: %w", err)
	}
	// And store.redis.tls's: the connections to Redis dialled once it
	// is applied present the rotated certificate.
	redisTLS, err := loadRedisTLS(cfg)
	if err != nil {
		return fmt.Errorf("daemon: reload: %w", err)
	}
	counted := d.metrics.RuleNames()
	gen, err := d.build(cfg, old)
	var rt *routes
	if err == nil && d.fleet != nil {
		rt, err = d.fleet.prepare(gen.rules, gen.descs)
	}
	if err == nil && still != nil && !still() {
		err = errNamedMoved
		if rt != nil {
			d.fleet.discard()
		}
	}
	var needs []redisstore.Need
	if err == nil && d.lazy != nil {
		// A rule may bring a feature whose commands the user's ACL
		// lacks (redisNeeds): refused, as at startup. Asked last, as
		// nothing else can refuse the reload after it: the check that
		// passes makes these the needs /readyz checks. A connection to
		// Redis made before the reload is decided waits for it, then
		// checks the needs it left in force (see lazyRedis.connect).
		defer d.lazy.hold()()
		needs = redisNeeds(cfg, gen.descs, redisPrefix(cfg))
		if err = d.lazy.check(context.Background(), needs); err != nil {
			err = fmt.Errorf("daemon: reload: store.redis: %w; %s", err, refusalHint(err))
			if rt != nil {
				d.fleet.discard()
			}
		}
	}
	if err != nil {
		// The new engine made hot-key summaries and decision counters
		// for its rules: drop those of rules never in force, or
		// GET /v1/hotkeys and /metrics would list rules of the refused
		// config.
		d.keepHot(old)
		var made []string
		for _, sp := range cfg.Rules {
			if !counted[sp.Name] {
				made = append(made, sp.Name)
			}
		}
		d.metrics.ForgetRules(made)
		return err
	}
	d.cur.Store(gen)
	if usesXDS(cfg) && cfg.GRPC.MergeDomains != old.cfg.GRPC.MergeDomains {
		d.xdsEpoch.Add(1) // a config of the xDS server refused may now pass
	}
	d.warnNotRead(gen.descs)
	if d.lazy != nil {
		// Checked when the store connects, if it has not yet.
		d.lazy.setNeeds(needs)
	}
	if c, ok := old.proxy.(interface{ Close() }); ok && old.proxy != gen.proxy {
		// Rebuilt (wire.go): the old proxy's idle upstream connections
		// would stay open as long as the upstream keeps them.
		c.Close()
	}
	d.useRoutes(rt)
	for i, l := range d.tls {
		changed, err := l.Store(certs[i])
		d.certsInForce(l, changed, err)
	}
	d.useXDSTLS(xdsTLS)
	d.useRedisTLS(redisTLS)
	d.activate(gen)
	return nil
}

// useRoutes puts the fleet routes of the generation just stored in force
// (nil: no fleet store), once the decisions still routed by the old ones
// have ended (see fleetStore.use). What the old rules held locally that
// cannot be handed back is logged: the generation is in force anyway.
func (d *Daemon) useRoutes(rt *routes) {
	if rt == nil {
		return
	}
	if err := d.fleet.use(rt); err != nil {
		d.log.Warn("fleet: handing back the sync hits or leases of rules changed or removed", "err", err)
	}
}

// watchConfig runs, in goroutines of wg until ctx is done, the watch of
// the config file and the reloads it triggers (see runWatch), one at once
// if the file changed before the watch began.
func (d *Daemon) watchConfig(ctx context.Context, wg *sync.WaitGroup) {
	changed := make(chan struct{}, 1)
	if d.staleAtStart {
		changed <- struct{}{}
	}
	d.runWatch(ctx, wg, d.watcher, changed, d.reloader.putOff, func() { d.reloader.reload(false) })
}

// runWatch runs cw, in goroutines of wg until ctx is done, and calls fire
// once per burst of the changes it reports (debounce), but not while a
// writer is still writing the file in place (configWatcher.writing): then
// it calls putOff, and fire again once the writer closes the file or has
// held it for maxWriteWait.
func (d *Daemon) runWatch(ctx context.Context, wg *sync.WaitGroup, cw *configWatcher, changed chan struct{}, putOff, fire func()) {
	wg.Go(func() { cw.run(ctx, d.log, changed) })
	wg.Go(func() {
		var wake *time.Timer // tries again once a writer held the file too long
		defer func() {
			if wake != nil {
				wake.Stop()
			}
		}()
		// later tries again after left: a writer that holds a file
		// open that long does not hold the reload back for ever.
		later := func(left time.Duration) {
			if wake != nil {
				wake.Stop()
			}
			wake = time.AfterFunc(left, func() {
				select {
				case changed <- struct{}{}:
				default:
				}
			})
		}
		debounce(ctx, changed, d.opts.ReloadDebounce, func() {
			if writing, left := cw.writing(); writing {
				// Written in place by a writer still at work: what the
				// file holds may be half of it. Its closing the file is
				// a change; or try again after left.
				putOff()
				later(left)
				return
			}
			if fireHook != nil {
				fireHook(cw)
			}
			fire()
			if writing, left := cw.writing(); writing {
				// A file missing at the check above came back before
				// fire read it, its creator at work: fire put its read
				// off. Its closing the file is a change; or left.
				later(left)
			}
		})
	})
}

// fireHook, set by tests, is called by runWatch between its check that no
// file of cw is being written and the reload it then makes.
var fireHook func(cw *configWatcher)

// checkedHook, set by tests, is called by a reload between its own check
// that no file it reads is being written and its read: with the config
// file's path, or with "descriptors".
var checkedHook func(what string)

// watchToken starts watching api.token_file, so that a token rotated in
// place, by a rename or a Kubernetes Secret's ..data swap, is put in force
// without a SIGHUP (see tokenChanged). Only a daemon with a config file
// has one. Not fatal: a reload still reads it.
func (d *Daemon) watchToken(cfg *config.Config) {
	if cfg.API.TokenFile == "" || d.reloader == nil {
		return
	}
	var err error
	if d.tokenWatcher, err = newConfigWatcher(cfg.API.TokenFile); err != nil {
		d.log.Error("api.token_file not watched; reload with SIGHUP to put a new token in force", "err", err)
		return
	}
	d.tokenWatcher.watchWrites()
}

// tokenChanged follows a change to api.token_file: a config change refused
// since (over this very file, maybe: a deploy that writes both) is tried
// again first, and applied brings the token with it; otherwise, when the
// file holds another token than the one in force, the config is reloaded
// to put it in force (see reloader.again: not while the config file is
// being written in place).
func (d *Daemon) tokenChanged() {
	if d.reloader.retryFailed() {
		return
	}
	if tok, err := config.ReadToken(d.Config().API.TokenFile); err == nil && sha256.Sum256(tok) == d.cur.Load().token {
		return
	}
	d.reloader.again()
}

// namedPaths are the files besides the config that a reload reads, as
// the config in force names them (changing their paths needs a restart):
// the listeners' certificates, keys and client CAs, grpc.xds.tls's and
// store.redis.tls's files, the token file and the Envoy descriptor files.
func (d *Daemon) namedPaths() []string {
	var paths []string
	for _, l := range d.tls {
		o := l.Options()
		paths = append(paths, o.Cert, o.Key, o.ClientCA)
	}
	paths = append(paths, d.xdsTLSPaths()...)
	paths = append(paths, d.redisTLSPaths()...)
	cfg := d.Config()
	paths = append(paths, cfg.API.TokenFile)
	if cfg.GRPC != nil {
		paths = append(paths, cfg.GRPC.Config...)
	}
	return slices.DeleteFunc(paths, func(p string) bool { return p == "" })
}

// namedDigest digests the files of namedPaths: a refused config is tried
// again when it changed (reloader.retryFailed).
func (d *Daemon) namedDigest() [sha256.Size]byte { return filesDigest(d.namedPaths()) }

// namedGone returns a file of namedPaths that is missing and that the
// config in data names too (any, for nil data), or "": a reload of data
// then waits for it. A config that names it no more (its reference taken
// out while it is missing) does not wait for it: it is read at once.
func (d *Daemon) namedGone(data []byte) string {
	var names []string // those data names, once read
	read := false
	for _, p := range d.namedPaths() {
		if !missing(p) {
			continue
		}
		if data == nil {
			return p
		}
		if !read {
			names, read = config.NamedFiles(d.opts.ConfigPath, data), true
		}
		if slices.Contains(names, p) {
			return p
		}
	}
	return ""
}

// namedLook returns what the files of namedDigest are now (see
// configWatcher.look), for namedStill to compare once they are read.
func (d *Daemon) namedLook() string {
	var b strings.Builder
	for _, w := range []*configWatcher{d.certWatcher, d.tokenWatcher, d.descWatcher} {
		b.WriteString(w.look())
		b.WriteByte(0)
	}
	return b.String()
}

// namedStill reports whether the files of namedDigest are as namedLook
// found them (sig) and none is being written in place (see
// configWatcher.still).
func (d *Daemon) namedStill(sig string) bool {
	return !d.namedWriting() && d.namedLook() == sig
}

// namedWriting reports whether one of the files of namedDigest is being
// written in place (see configWatcher.writing): a reload then waits.
func (d *Daemon) namedWriting() bool {
	for _, w := range []*configWatcher{d.certWatcher, d.tokenWatcher, d.descWatcher} {
		if w == nil {
			continue
		}
		if writing, _ := w.writing(); writing {
			return true
		}
	}
	return false
}
