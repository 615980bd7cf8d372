package daemon

import (
	"context"
	"net/url"
	"sync"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/descriptors"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/hotkeys"
	"github.com/sluicehq/sluice/internal/rules"
)

// Hot keys, shards and deferral: the parts of the daemon that outlive a
// reload (a rule's hot-key summary and its deferral queue carry on while
// the rule keeps its name).

// HotKeysRefresh is how often the hot sets of shards: auto are recomputed.
const HotKeysRefresh = time.Second

// openFeatures makes the hot-key summaries (any store) and, on Redis, the
// deferral queue.
func (d *Daemon) openFeatures(cfg *config.Config) error {
	d.hot = hotkeys.NewSet(hotkeys.Options{}, 0, 0)
	if err := d.reg.Register(d.hot); err != nil {
		return err
	}
	if d.lazy == nil {
		return nil
	}
	prefix := redisPrefix(cfg)
	d.hotPrefix = prefix + "hot:"
	o := cfg.Defer.Options()
	o.Connect = func() rueidis.Client {
		if s := d.lazy.s.Load(); s != nil {
			return s.Client()
		}
		return nil
	}
	o.Prefix = prefix + "defer:"
	o.Registerer = d.reg
	o.Logger = d.log
	q, err := deferq.New(o)
	if err != nil {
		return err
	}
	d.deferq = q
	return nil
}

// engineOptions adds the hot-key summaries, sharding and, on Redis,
// store.redis.timeout (cfg's: the store is bound at startup) to o. Nothing is
// sharded while the daemon decides in memory (on_error: local): shards
// spread Redis's load, and in memory each shard's share of the local
// share, rounded up to 1, would admit more than the rule's local share.
func (d *Daemon) engineOptions(o engine.Options, cfg *config.Config) engine.Options {
	o.HotKeys = d.hot
	if d.lazy != nil {
		o.StoreTimeout = cfg.Store.Redis.Timeout
		o.Shard = func(r *sluice.Request, n int) int {
			if d.fallback != nil && d.fallback.Mode() == fleet.ModeLocal {
				return 1
			}
			if s := d.lazy.s.Load(); s != nil {
				return s.Shard(r, n)
			}
			return 1 // not connected: the request fails anyway
		}
		o.Spread = func(r sluice.Request, n int) []sluice.Request {
			if s := d.lazy.s.Load(); s != nil && (d.fallback == nil || d.fallback.Mode() != fleet.ModeLocal) {
				return s.Spread(r, n)
			}
			return []sluice.Request{r}
		}
		o.Shards = func(r sluice.Request, n int) []sluice.Request {
			if s := d.lazy.s.Load(); s != nil && (d.fallback == nil || d.fallback.Mode() != fleet.ModeLocal) {
				return s.Shards(r, n)
			}
			return nil
		}
		o.AutoShards = func() int {
			if s := d.lazy.s.Load(); s != nil {
				return s.Masters()
			}
			return 1
		}
	}
	return o
}

// activate points the long-lived parts at gen, the generation just put in
// force: the summaries of rules gone are dropped, the deferral queue gets
// the defer rules and the upstream.
func (d *Daemon) activate(gen *generation) {
	var defers []deferq.Rule
	for _, r := range gen.rules.Rules {
		if r.Action == rules.Defer {
			defers = append(defers, deferq.Rule{Name: r.Name, MaxQueue: r.Defer.MaxQueue, MaxBodyBytes: r.Defer.MaxBodyBytes, Take: d.replayTake(r.Name)})
		}
	}
	d.keepHot(gen)
	if d.deferq == nil {
		return
	}
	var up *url.URL
	if gen.cfg.Proxy != nil {
		up, _ = url.Parse(gen.cfg.Proxy.Upstream)
	}
	d.deferq.SetUpstream(up)
	d.deferq.SetRules(defers)
}

// keepHot drops the hot-key summaries of rules gone: those of gen's rules
// and of its descriptors with shards: auto (named "envoy/DOMAIN/PATH")
// stay.
func (d *Daemon) keepHot(gen *generation) {
	names := make([]string, 0, len(gen.rules.Rules))
	auto := map[string]time.Duration{}
	for _, r := range gen.rules.Rules {
		names = append(names, r.Name)
		if r.Shards.Auto {
			auto[r.Name] = shareTTL(r.Algorithm, r.Limit)
		}
	}
	gen.descs.Each(func(r *descriptors.Rule) {
		if r.Shards.Auto {
			names = append(names, r.FullName())
			auto[r.FullName()] = shareTTL(r.Algorithm, r.Limit)
		}
	})
	d.hot.Keep(names)
	d.hotAuto.Store(&auto)
}

// replayTake is the pace of replay for the defer rule named name: its own
// limit on the request's keys, in the engine in force (the counter live
// traffic uses, so the upstream never sees more than the rate). A request
// the rule counted under several keys (a key part sent with several
// values) goes when every one of them admits it, and is charged on all or
// none, as it was live.
func (d *Daemon) replayTake(name string) func(context.Context, []string) (sluice.Decision, error) {
	return func(ctx context.Context, keys []string) (sluice.Decision, error) {
		e := d.engine()
		r := e.Rules().Rule(name)
		if r == nil {
			return sluice.Decision{RetryAfter: time.Minute}, nil // the rule is gone: hold on
		}
		var res engine.Result
		if len(keys) == 1 || r.Action == rules.Shadow {
			res = e.Check(ctx, r, keys[0], 1)
		} else {
			ms := make([]rules.Match, len(keys))
			for i, k := range keys {
				ms[i] = rules.Match{Rule: r, Key: k}
			}
			res = e.Decide(ctx, ms, 1)
		}
		if res.Err != nil { // ctx ended before the store answered
			return sluice.Decision{}, res.Err
		}
		if res.StoreErr != nil {
			return sluice.Decision{}, res.StoreErr
		}
		return res.Decision, nil
	}
}

// runFeatures runs the hot-set refresher and the deferral workers until
// ctx ends; the returned func waits for them (deliveries in flight record
// their outcome before the store closes).
func (d *Daemon) runFeatures(ctx context.Context) (wait func()) {
	var wg sync.WaitGroup
	wg.Go(func() { onTick(ctx, HotKeysRefresh, d.refreshHot) })
	if d.deferq != nil {
		wg.Go(func() { d.deferq.Run(ctx) })
	}
	return wg.Wait
}
