package daemon

import (
	"context"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice/redisstore"
)

// Hot keys shared by the fleet (shards: auto). Each instance finds its hot
// keys from its own traffic; left at that, two instances whose traffic
// differs would disagree about a key for as long as it lasts, one counting
// it on its shards and the other on the key alone: two budgets, up to
// twice the limit. So every refresh, each instance adds the keys it finds
// hot, for each rule with shards: auto, to a sorted set in Redis scored by
// when they expire (HotKeysShareTTL later, by Redis's clock), and reads the
// set back: a key any instance finds hot is sharded by all of them, within
// a refresh or two of each other, and stops being so HotKeysShareTTL after
// the last instance finding it hot cooled down.

// HotKeysShareTTL is how long a key one instance finds hot stays in the
// fleet's set after that instance last said so.
const HotKeysShareTTL = 5 * time.Second

// maxFleetHot bounds the keys read back per rule (each instance adds at
// most its top 10).
const maxFleetHot = 1000

// shareHot adds ARGV[2…] (this instance's hot keys) to the set KEYS[1]
// until ARGV[1] ms from now, drops the members that expired, and returns
// the others.
var shareHot = rueidis.NewLuaScript(shareHotLua)

var shareHotLua = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[i])
end
if #ARGV > 1 then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return redis.call('ZRANGE', KEYS[1], 0, ` + strconv.Itoa(maxFleetHot-1) + `)
`

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
	d.hot.Share(func(rule string, local []string) ([]string, bool) {
		if !(*auto)[rule] {
			return nil, true
		}
		ctx, cancel := context.WithTimeout(context.Background(), HotKeysRefresh)
		defer cancel()
		args := append([]string{strconv.FormatInt(HotKeysShareTTL.Milliseconds(), 10)}, local...)
		fleet, err := shareHot.Exec(ctx, s.Client(), []string{d.hotPrefix + rule}, args).AsStrSlice()
		if err != nil {
			d.log.Debug("hot keys: sharing with the fleet", "rule", rule, "err", err)
			return nil, false
		}
		return fleet, true
	})
}
