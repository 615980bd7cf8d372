package daemon

import (
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/descriptors"
	"github.com/sluicehq/sluice/redisstore"
)

// redisNeeds returns what the daemon of cfg runs in Redis besides the
// store's scripts and Ping, for the store's ACL check at startup
// (redisstore.Options.Needs), keys under prefix: INFO server (the
// restart watch, always), SUBSCRIBE on the refunds' channel,
// redisstore.RefundChannelOf(prefix, db) (the over-limit
// cache's feed of refunds, always), the deferral queue's commands when a rule has
// action: defer, and the fleet's hot-key sets' when a rule or Envoy
// descriptor has shards: auto. A user whose ACL lacks one of them is
// refused at startup, naming the command and what needs it, rather than
// running with that feature failing NOPERM at every turn; a command no
// feature in the config runs is not asked for. Each need also names the
// oldest Redis that runs it (Need.MinRedis): a server older is refused
// the same way (redisstore.ErrVersion), naming the feature and both
// versions, rather than the feature failing at every turn as an unknown
// command.
//
// descs are the Envoy descriptors to run with cfg (LoadDescriptors; nil:
// none). A reload checks the needs of its config, or descriptors, again
// (lazyRedis.check).
func redisNeeds(cfg *config.Config, descs *descriptors.Set, prefix string) []redisstore.Need {
	needs := []redisstore.Need{{
		Feature:  fmt.Sprintf("the restart watch, every %v", RedisWatchInterval),
		Commands: [][]string{{"INFO", "server"}},
	}, {
		// The store's refunds PUBLISH there (redisstore.Options.PublishRefunds,
		// checked by the store itself).
		Feature:  "the over-limit cache, told of the other instances' refunds",
		Commands: [][]string{{"SUBSCRIBE", redisstore.RefundChannelOf(prefix, cfg.Store.Redis.DB)}},
	}}
	var deferred, auto []string
	for i := range cfg.Rules {
		sp := &cfg.Rules[i]
		if sp.Action == "defer" {
			deferred = append(deferred, fmt.Sprintf("%q", sp.Name))
		}
		if sp.Shards.Auto {
			auto = append(auto, sp.Name)
		}
	}
	descs.Each(func(r *descriptors.Rule) {
		if r.Shards.Auto {
			auto = append(auto, r.FullName())
		}
	})
	if len(deferred) > 0 {
		needs = append(needs, redisstore.Need{
			Feature:  "action: defer of rule " + strings.Join(deferred, ", "),
			Commands: deferq.Commands(prefix + "defer:"),
			// Also exclusive XRANGE bounds (6.2), LPOS (6.0.6), SCAN
			// TYPE (6.0).
			MinRedis: "6.2", MinRedisFor: "XAUTOCLAIM",
		})
	}
	for _, name := range auto {
		needs = append(needs, redisstore.Need{
			Feature:  fmt.Sprintf("shards: auto of %q (the fleet's hot keys)", name),
			Commands: hotShareCommands(prefix + "hot:" + name),
			MinRedis: "5.0", MinRedisFor: "TIME before writes in a script",
		})
	}
	return needs
}

// redisPrefix is the prefix of the daemon's Redis keys.
func redisPrefix(cfg *config.Config) string {
	if p := cfg.Store.Redis.KeyPrefix; p != "" {
		return p
	}
	return redisstore.DefaultPrefix
}
