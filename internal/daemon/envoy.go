package daemon

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/descriptors"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/redisstore"
)

// LoadDescriptors reads the Envoy descriptor files of cfg's grpc.config
// (nil, nil without a grpc block). The fleet options (sync, lease, shards)
// need the Redis store, as on rules: on the memory store they are refused,
// naming file and line. check-config and serve both call it, so they
// agree.
func LoadDescriptors(cfg *config.Config) (*descriptors.Set, error) {
	if cfg.GRPC == nil {
		return nil, nil
	}
	set, err := descriptors.LoadWith(cfg.GRPC.Config, descriptors.LoadOptions{MergeDomains: cfg.GRPC.MergeDomains})
	if err != nil {
		return nil, err
	}
	if cfg.Store.Type == config.StoreRedis {
		return set, nil
	}
	var es rules.ParseErrors
	set.Each(func(r *descriptors.Rule) {
		refuse := func(used bool, key string) {
			if used {
				es = append(es, &rules.ParseError{File: r.File, Line: r.Line, Key: r.Path + "." + key,
					Msg: "counts across a fleet of instances: it needs store.type: redis"})
			}
		}
		refuse(r.Sync != 0, "sync")
		refuse(!r.Lease.IsZero(), "lease")
		refuse(!r.Shards.IsZero(), "shards")
	})
	if err := es.Err(); err != nil {
		return nil, err
	}
	return set, nil
}

// NotRead returns a warning for each entry of set's listed directories
// that was not read (descriptors.Set.Skipped): the reference service reads
// every file under its directory, so each may hold a domain it served,
// which would otherwise be answered OK, unknown, without a word.
// check-config prints them; serve logs them on every load.
func NotRead(set *descriptors.Set) []string {
	var ws []string
	for _, p := range set.Skipped() {
		why := "not a *.yaml or *.yml file (the reference service reads every file of its directory: rename it if it holds a domain)"
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			why = "a subdirectory (the reference service reads those too: list it in grpc.config if it holds descriptor files)"
		}
		ws = append(ws, "warning: "+p+": not read: "+why)
	}
	return ws
}

// warnNotRead logs NotRead's warnings.
func (d *Daemon) warnNotRead(set *descriptors.Set) {
	for _, w := range NotRead(set) {
		d.log.Warn("descriptor directory entry not read", "problem", w)
	}
}

// rls returns the rate limit service in force; the gRPC listener calls it
// once per request.
func (d *Daemon) rls() *server.RLS { return d.cur.Load().rls }

// descriptorSet returns the descriptor config in force.
func (d *Daemon) descriptorSet() *descriptors.Set { return d.cur.Load().descs }

// newRLS builds the rate limit service of cfg (nil without a grpc block).
func (d *Daemon) newRLS(cfg *config.Config) (*server.RLS, error) {
	if cfg.GRPC == nil {
		return nil, nil
	}
	rls, err := server.NewRLS(server.RLSOptions{
		Engine:       d.engine,
		Descriptors:  d.descriptorSet,
		Metrics:      d.metrics,
		Headers:      cfg.GRPC.ResponseHeaders,
		Shadow:       cfg.GRPC.ShadowMode,
		Quota:        cfg.GRPC.QuotaMode,
		Unavailable:  cfg.GRPC.OnError == config.GRPCOnErrorUnavailable,
		MaxBodyBytes: cfg.Limits.MaxBodyBytes,
		Logger:       d.log,
	})
	if err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	return rls, nil
}

// descriptorsChanged reports whether the descriptor files of the config in
// force, read again, load and differ from the descriptors in force.
func (d *Daemon) descriptorsChanged() bool {
	cur := d.cur.Load()
	if cur.cfg.GRPC == nil || usesXDS(cur.cfg) {
		return false
	}
	set, err := LoadDescriptors(cur.cfg)
	return err == nil && set.Digest() != cur.descs.Digest()
}

// reloadDescriptors rereads the descriptor files of the config in force
// and swaps them in when they changed and are valid; an invalid change is
// refused (logged and counted) and the old descriptors stay, as for the
// main config. Counters of unchanged limits carry on: store keys depend on
// the limit, not on the file.
func (d *Daemon) reloadDescriptors() ReloadResult {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	if d.stopping.Load() {
		return ReloadResult{Err: ErrShuttingDown}
	}
	old := d.cur.Load()
	if old.cfg.GRPC == nil || usesXDS(old.cfg) {
		return ReloadResult{Unchanged: true} // no files: the xDS server sends changes
	}
	for _, p := range old.cfg.GRPC.Config {
		if missing(p) {
			// Deleted before it is written again, or a ..data swap to
			// a version without it: waited for, as the config file is
			// (its return is an event, or the watcher's 2 s look).
			if !d.descMissing {
				d.log.Warn("descriptor file is missing: the descriptors in force stay; they are reloaded when it is back", "path", p)
				d.descMissing = true
			}
			res := ReloadResult{Missing: true}
			if d.opts.OnReload != nil {
				d.opts.OnReload(res)
			}
			return res
		}
	}
	d.descMissing = false
	var (
		seen [sha256.Size]byte
		set  *descriptors.Set
		err  error
	)
	if d.descWatcher.checkedRead("descriptors", func() {
		seen = filesDigest(old.cfg.GRPC.Config)
		set, err = LoadDescriptors(old.cfg)
	}) != readWhole {
		// One came back since the watcher found none being written
		// (runWatch), missing then, its creator at work still; or
		// one kept being replaced or written to while read (removed
		// and created again, its creator at work): what was read may
		// be its first part. Read at the next change (its writer
		// closing it); the caller says it waits.
		return ReloadResult{Writing: true}
	}
	if err == nil {
		if set.Digest() == old.descs.Digest() {
			err = errUnchanged
		} else {
			err = d.useDescriptors(old, set)
		}
	}
	res := ReloadResult{Err: err}
	switch {
	case errors.Is(err, errUnchanged):
		d.descRefused, d.descRefusedWhy = [sha256.Size]byte{}, ""
		res = ReloadResult{Unchanged: true}
	case err != nil && seen == d.descRefused && err.Error() == d.descRefusedWhy:
		// The files refused last time, unchanged, and for the same
		// reason: reread because something else in their directory
		// changed. Refused once, counted and logged once, as a config
		// file is. Files that load are tried again all the same: what
		// refused them (the Redis user's ACL, the fleet) may change
		// without them.
		res = ReloadResult{Unchanged: true}
	case err != nil:
		d.descRefused, d.descRefusedWhy = seen, err.Error()
		d.metrics.Reload(false)
		var es rules.ParseErrors
		if errors.As(err, &es) {
			for _, e := range es {
				d.log.Error("descriptor reload refused; the old descriptors stay", "problem", e.Error())
			}
		} else {
			d.log.Error("descriptor reload refused; the old descriptors stay", "err", err)
		}
	default:
		d.descRefused, d.descRefusedWhy = [sha256.Size]byte{}, ""
		d.metrics.Reload(true)
		d.log.Info("descriptors reloaded", "files", len(set.Files()), "domains", set.Domains(), "rules", set.Rules())
		d.warnNotRead(set)
	}
	if d.opts.OnReload != nil {
		d.opts.OnReload(res)
	}
	return res
}

// errUnchanged is reloadDescriptors' word for descriptor files that load
// as the descriptors in force: nothing to do.
var errUnchanged = errors.New("daemon: descriptors unchanged")

// useDescriptors puts set in force in place of the descriptors of old,
// the generation in force. It is refused, as a reload of the config file
// is, when the Redis user's ACL lacks a command that set needs (shards:
// auto, see redisNeeds), or when the fleet cannot route its rules.
func (d *Daemon) useDescriptors(old *generation, set *descriptors.Set) error {
	var rt *routes
	if d.fleet != nil {
		var err error
		if rt, err = d.fleet.prepare(old.rules, set); err != nil {
			return err
		}
	}
	var needs []redisstore.Need
	if d.lazy != nil {
		// As in apply: asked last, a connection to Redis made meanwhile
		// waits, then checks the needs left in force.
		defer d.lazy.hold()()
		needs = redisNeeds(old.cfg, set, redisPrefix(old.cfg))
		if err := d.lazy.check(context.Background(), needs); err != nil {
			if rt != nil {
				d.fleet.discard()
			}
			return fmt.Errorf("daemon: descriptors: store.redis: %w; %s", err, refusalHint(err))
		}
	}
	gen := *old
	gen.descs = set
	d.cur.Store(&gen)
	if d.lazy != nil {
		d.lazy.setNeeds(needs)
	}
	d.useRoutes(rt)
	d.keepHot(&gen)
	return nil
}

// watchDescriptors runs, in goroutines of wg until ctx is done, the watch
// of the descriptor files and the reloads it triggers (see runWatch): none
// while one of the files is being written in place.
func (d *Daemon) watchDescriptors(ctx context.Context, wg *sync.WaitGroup) {
	waiting := false // put off since the last reload (logged once)
	putOff := func() {
		if !waiting {
			d.log.Info("descriptor file is being written in place: waiting for its writer to close it", "paths", d.Config().GRPC.Config)
			waiting = true
		}
		if d.opts.OnReload != nil {
			d.opts.OnReload(ReloadResult{Writing: true})
		}
	}
	d.runWatch(ctx, wg, d.descWatcher, make(chan struct{}, 1), putOff, func() {
		waiting = false
		// A config change refused over a broken descriptor file is tried
		// again first, once the descriptors load and differ: applied, it
		// brings them with it, rather than the fix landing alone over the
		// old config. So is one put off while a descriptor file was
		// being written.
		if d.reloader != nil {
			d.reloader.retry(d.descriptorsChanged)
		}
		if d.reloadDescriptors().Writing {
			putOff()
		}
	})
}

// filesDigest returns a digest of what Load would read of paths: each
// file's content, and each listed directory's YAML files by name and
// content (an error reading one counts as its content).
func filesDigest(paths []string) [sha256.Size]byte {
	h := sha256.New()
	file := func(name string) {
		b, err := os.ReadFile(name)
		if err != nil {
			b = []byte("\x00" + err.Error())
		}
		fmt.Fprintf(h, "%d:%s%d:", len(name), name, len(b))
		h.Write(b)
	}
	for _, p := range paths {
		es, err := os.ReadDir(p)
		if err != nil {
			file(p) // a file, or an error of its own
			continue
		}
		for _, e := range es {
			if !e.IsDir() && descriptors.Listed(e.Name()) {
				file(filepath.Join(p, e.Name()))
			}
		}
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}
