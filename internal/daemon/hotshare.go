package daemon

import (
	"cmp"
	"context"
	"errors"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// Hot keys shared by the fleet (shards: auto). Each instance finds its hot
// keys from its own traffic; left at that, two instances whose traffic
// differs would disagree about a key for as long as it lasts, one counting
// it on its shards and the other on the key alone: two budgets, up to
// twice the limit. So every refresh, each instance adds the keys it finds
// hot, for each rule with shards: auto, to a sorted set in Redis scored by
// when they expire (the rule's shareTTL later, by Redis's clock), and
// reads the set back: a key any instance finds hot is sharded by all of
// them, within a refresh or two of each other, and stops being so
// shareTTL after the last instance finding it hot cooled down.
//
// shareTTL is the rule's horizon (restAfter: how long a key used to the
// full takes to come to rest) plus HotKeysShareTTL. A key leaves its
// shards only once its own key, last used when the key went hot (on an
// instance that learnt it from the fleet, a refresh or two later), is at
// rest: its old count, from before the key went hot, is not counted
// again on top of what its shards admitted since. Kept only
// HotKeysShareTTL, a key that went hot, cold and hot again within a window
// was counted on both budgets, each its whole limit: twice the limit.

// HotKeysShareTTL is how long a key one instance finds hot stays in the
// fleet's set after that instance last said so, past the rule's horizon:
// the time the instances take to learn of it (a refresh or two).
const HotKeysShareTTL = 5 * time.Second

// maxFleetHot bounds the keys the fleet's set of a rule holds (each
// instance adds at most its top 10 each refresh): past it, the keys found
// hot least recently leave it, and their shards, first.
const maxFleetHot = 1000

// shareHot adds ARGV[2…] (this instance's hot keys) to the set KEYS[1]
// until ARGV[1] ms from now, drops the members that expired and, past
// maxFleetHot, those that expire first, and returns the others (the
// fleet's set), the keys it added that were not members (added) and those
// it dropped (gone): one script, so each key joins and leaves the set at
// one call of one instance, which seeds its counters (hotseed.go). The set
// itself expires twice ARGV[1] after the last key was added, so that its
// last members are dropped, and told of, by a call before it does.
var shareHot = rueidis.NewLuaScript(shareHotLua)

var shareHotLua = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local added = {}
for i = 2, #ARGV do
  if redis.call('ZADD', KEYS[1], now + ttl, ARGV[i]) == 1 then
    added[#added + 1] = ARGV[i]
  end
end
if #ARGV > 1 then
  for _, k in ipairs(redis.call('ZRANGE', KEYS[1], 0, -` + strconv.Itoa(maxFleetHot+1) + `)) do
    gone[#gone + 1] = k
  end
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -` + strconv.Itoa(maxFleetHot+1) + `)
  redis.call('PEXPIRE', KEYS[1], 2 * ttl)
end
return {redis.call('ZRANGE', KEYS[1], 0, -1), added, gone}
`

// shareReply reads shareHot's reply.
func shareReply(res rueidis.RedisResult) (fleet, added, gone []string, err error) {
	parts, err := res.ToArray()
	if err == nil && len(parts) != 3 {
		err = errors.New("hot keys: malformed reply")
	}
	if err != nil {
		return nil, nil, nil, err
	}
	lists := [3][]string{}
	for i := range parts {
		if lists[i], err = parts[i].AsStrSlice(); err != nil {
			return nil, nil, nil, err
		}
	}
	return lists[0], lists[1], lists[2], nil
}

// shareHotCall matches a command of shareHotLua and whether it runs on
// KEYS[1].
var shareHotCall = regexp.MustCompile(`redis\.call\('([A-Z]+)'(, KEYS\[1\])?`)

// hotShareCommands are the commands shareHot runs on key, as Redis's ACL
// reads them (redisstore.Need): read from the script, so the list cannot
// drift from it.
func hotShareCommands(key string) [][]string {
	cmds := redisstore.ScriptsOn(key)
	for _, m := range shareHotCall.FindAllStringSubmatch(shareHotLua, -1) {
		argv := []string{m[1]}
		if m[2] != "" {
			argv = append(argv, key)
		}
		if !slices.ContainsFunc(cmds, func(c []string) bool { return slices.Equal(c, argv) }) {
			cmds = append(cmds, argv)
		}
	}
	return cmds
}

// refreshHot recomputes the hot sets (Set.Refresh) and, on Redis, shares
// those of the rules with shards: auto with the fleet. A rule without it
// gets no fleet set; a failed exchange leaves the rule's as it was.
func (d *Daemon) refreshHot(now time.Time) {
	d.hot.Refresh(now)
	if d.lazy == nil {
		return
	}
	s := d.lazy.s.Load()
	auto := d.hotAuto.Load()
	if s == nil || auto == nil {
		return
	}
	var moves []hotMove
	d.hot.Share(func(rule string, local []string) ([]string, bool) {
		ttl, ok := (*auto)[rule]
		if !ok {
			return nil, true
		}
		ctx, cancel := context.WithTimeout(context.Background(), cmp.Or(d.opts.shareTimeout, HotKeysRefresh))
		defer cancel()
		args := append([]string{strconv.FormatInt(ttl.Milliseconds(), 10)}, local...)
		fleet, added, gone, err := shareReply(shareHot.Exec(ctx, s.Client(), []string{d.hotPrefix + rule}, args))
		if err != nil {
			d.log.Debug("hot keys: sharing with the fleet", "rule", rule, "err", err)
			return nil, false
		}
		moves = appendMoves(moves, rule, added, gone)
		return fleet, true
	})
	d.seed(s, moves, now)
}

// shareTTL is how long a key of a rule of algorithm a and limit l stays in
// the fleet's set after an instance last found it hot: the rule's horizon
// plus HotKeysShareTTL (see above).
func shareTTL(a sluice.Algorithm, l sluice.Limit) time.Duration {
	return restAfter(a, l) + HotKeysShareTTL
}

// restAfter is how long a key of algorithm a and limit l takes, at the
// latest, to come to rest (to decide as a key never seen) after its last
// decision: the rest of a key used to the full at once, at an instant
// that starts every window (the Unix epoch). Forced charges' debt aside.
func restAfter(a sluice.Algorithm, l sluice.Limit) time.Duration {
	full := l.Rate
	switch a {
	case sluice.TokenBucket, sluice.GCRA:
		full = l.BurstOrRate()
	case sluice.LeakyBucket:
		full = l.BurstOrRate() + 1
	}
	var st sluice.State
	_, rest, err := a.Take(&st, l, sluice.MinTime, full)
	if err != nil {
		return 0
	}
	return rest.Sub(sluice.MinTime)
}
