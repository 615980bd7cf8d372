package redisstore

import (
	"context"
	"fmt"
	"io/fs"
	"regexp"
	"slices"

	"github.com/redis/rueidis"
)

// The store's scripts run Redis commands on keys under the prefix. A user
// whom Redis's ACL keeps from running scripts, from those keys or from one
// of those commands gets NOPERM on every decision, which the caller then
// takes for an outage (the daemon answers per on_error: by default, it
// lets everything through). So New asks Redis once, on a key under the
// prefix, whether the user may run them (probe), and refuses a user who
// may not with ErrAuth.

// scriptCommands are the commands the embedded scripts run, upper case,
// sorted: read from the scripts themselves, so the list cannot drift from
// them.
var scriptCommands = func() []string {
	re := regexp.MustCompile(`(?:redis\.p?call|chunked)\('([A-Z]+)'`)
	var cmds []string
	files, _ := fs.Glob(luaFS, "*.lua")
	for _, f := range files {
		b, _ := luaFS.ReadFile(f)
		for _, m := range re.FindAllSubmatch(b, -1) {
			if c := string(m[1]); !slices.Contains(cmds, c) {
				cmds = append(cmds, c)
			}
		}
	}
	slices.Sort(cmds)
	return cmds
}()

// probeLua returns the first of ARGV (commands) the user may not run on
// KEYS[1], or "" (redis.acl_check_cmd: Redis 7 and later; before, running
// it at all shows that the user may run scripts on that key).
var probeLua = rueidis.NewLuaScript(`
if redis.acl_check_cmd then
  for i = 1, #ARGV do
    local ok
    if ARGV[i] == 'TIME' then
      ok = redis.acl_check_cmd('TIME')
    else
      ok = redis.acl_check_cmd(ARGV[i], KEYS[1])
    end
    if not ok then return ARGV[i] end
  end
end
return ''
`)

// probe reports, as a *refusedError wrapping ErrAuth, a user whom Redis's
// ACL keeps from what the scripts run on the key of a limiter key under
// the prefix; nil when it may, or when Redis could not tell (a timeout, an
// OOM, a Cluster moving the slot: decisions will say). New runs it (op
// "connect"), and Ping (op "ping"): a user's ACL may change while the
// store runs.
func (s *Store) probe(ctx context.Context, op string) error {
	key := s.Key("acl-probe")
	cmds := scriptCommands
	if !s.opts.RedisTime {
		// The scripts read Redis's clock only with RedisTime.
		cmds = slices.DeleteFunc(slices.Clone(cmds), func(c string) bool { return c == "TIME" })
	}
	res := probeLua.Exec(ctx, s.c, []string{key}, cmds)
	who := "the default user"
	if s.opts.Username != "" {
		who = fmt.Sprintf("user %q", s.opts.Username)
	}
	if err := res.Error(); err != nil {
		if refusedCredentials(err) {
			return &refusedError{op: op, addrs: s.opts.Addrs, what: "Redis's ACL keeps " + who + " from running the store's scripts on its keys", kind: ErrAuth, err: err}
		}
		return nil
	}
	if c, err := res.ToString(); err == nil && c != "" {
		return &refusedError{op: op, addrs: s.opts.Addrs, kind: ErrAuth,
			what: fmt.Sprintf("Redis's ACL does not let %s run %s on %s, which the store's scripts run (they need %v on the keys under %q)", who, c, key, cmds, s.opts.Prefix),
			err:  fmt.Errorf("NOPERM %s", c)}
	}
	return nil
}
