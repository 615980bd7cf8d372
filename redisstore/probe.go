package redisstore

import (
	"context"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// The store's scripts run Redis commands on keys under the prefix. A user
// whom Redis's ACL keeps from running scripts, from those keys or from one
// of those commands gets NOPERM on every decision, which the caller then
// takes for an outage (the daemon answers per on_error: by default, it
// lets everything through). So New asks Redis once, on a key under the
// prefix, whether the user may run them (probe), and refuses a user who
// may not with ErrAuth. It asks the same of the commands Ping runs, and
// of those the caller's features run (Options.Needs). A Cluster keeps
// its users per node (ACL SETUSER is not passed on), so on a Cluster it
// asks every master.

// A Need is a feature that runs Redis commands besides the store's
// scripts (on the Store's Client, or a connection of its own with the
// same user), with those commands: New checks that Redis's ACL lets the
// user run them (see Options.Needs).
type Need struct {
	// Feature names the feature in New's error: "action: defer (rule
	// \"jobs\")".
	Feature string
	// Commands are the commands the feature runs, each as Redis's ACL
	// reads it: the name, the subcommand if any, then the arguments as
	// far as the keys, such as {"XADD", "sluice:defer:{t}:q"},
	// {"XGROUP", "CREATE", "sluice:defer:{t}:q"}, {"INFO", "server"} or
	// {"TIME"}. Scripts are commands too: ScriptsOn gives those of
	// scripts run on some keys.
	Commands [][]string
	// MinRedis, if set, is the oldest Redis version that runs them all
	// ("6.2"), and MinRedisFor what needs it ("XAUTOCLAIM"): New (and
	// Require) fails with ErrVersion, naming them, the server and its
	// version, when a server is older.
	MinRedis, MinRedisFor string
	// own: the store's own scripts' need (Options.ownNeed), which no
	// option leaves out (StoreTooOld).
	own bool
}

// ScriptsOn returns the commands that running a script on key (with
// rueidis: EVALSHA, then EVAL when Redis lacks the script) is, for
// Need.Commands.
func ScriptsOn(key string) [][]string {
	return [][]string{{"EVALSHA", strings.Repeat("0", 40), "1", key}, {"EVAL", "return 0", "1", key}}
}

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

// probeLua returns, for each check in ARGV that Redis's ACL refuses the
// user, its (0-based) index and 1 when the command is refused, 2 when
// only its keys are. Each check is its length, the length of its name
// (1, or 2 with a subcommand), then the command as Need.Commands has it;
// a command Redis does not know is refused. redis.acl_check_cmd came
// with Redis 7: before, running the script at all shows that the user
// may run scripts on KEYS[1], and nothing else is checked.
var probeLua = rueidis.NewLuaScript(`
local function allowed(i, j)
  local ok, yes = pcall(redis.acl_check_cmd, unpack(ARGV, i, j))
  return ok and yes
end
local bad = {}
if redis.acl_check_cmd then
  local i, n = 1, 0
  while i <= #ARGV do
    local c, name = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
    if not allowed(i + 2, i + 1 + c) then
      bad[#bad + 1] = n
      if c > name and allowed(i + 2, i + 1 + name) then
        bad[#bad + 1] = 2
      else
        bad[#bad + 1] = 1
      end
    end
    i, n = i + c + 2, n + 1
  end
end
return bad
`)

// check is one command of a Need, for the probe.
type check struct {
	feature string
	argv    []string
}

// containers are the commands whose subcommand the ACL tells apart, so
// that an error names it ("CLUSTER INFO").
var containers = []string{"ACL", "CLIENT", "CLUSTER", "COMMAND", "CONFIG", "FUNCTION", "MEMORY", "OBJECT", "SCRIPT", "XGROUP", "XINFO"}

// channelCommands are the commands whose arguments the ACL reads as
// channels (&pattern), not keys.
var channelCommands = []string{"PUBLISH", "SUBSCRIBE", "PSUBSCRIBE", "SPUBLISH", "SSUBSCRIBE"}

// nameLen is how many of argv name the command: 2 for a container's
// subcommand, else 1.
func (c check) nameLen() int {
	if len(c.argv) > 1 && slices.Contains(containers, strings.ToUpper(c.argv[0])) {
		return 2
	}
	return 1
}

// name is the command as an error shows it: the name, and the
// subcommand of a container.
func (c check) name() string { return strings.ToUpper(strings.Join(c.argv[:c.nameLen()], " ")) }

// checks returns what the probe asks with key as the store's key: the
// scripts' commands, Ping's, then those of needs.
func (s *Store) checks(key string, needs []Need) []check {
	var cs []check
	scripts := "the store's scripts on the keys under " + strconv.Quote(s.opts.Prefix)
	for _, argv := range ScriptsOn(key) {
		cs = append(cs, check{scripts, argv})
	}
	for _, c := range scriptCommands {
		switch {
		case c == "TIME" && !s.opts.RedisTime:
			// The scripts read Redis's clock only with RedisTime.
		case c == "TIME":
			cs = append(cs, check{scripts, []string{c}})
		case c == "PUBLISH" && !s.opts.PublishRefunds:
			// Only a give-back with PublishRefunds publishes.
		case c == "PUBLISH":
			cs = append(cs, check{"the refunds published to the fleet (PublishRefunds)", []string{c, s.RefundChannel()}})
		default:
			cs = append(cs, check{scripts, []string{c, key}})
		}
	}
	if s.opts.Cluster {
		cs = append(cs, check{"the readiness check (Ping)", []string{"CLUSTER", "INFO"}},
			check{"the Cluster's slot map", []string{"CLUSTER", "SLOTS"}})
	} else {
		cs = append(cs, check{"the readiness check (Ping)", []string{"PING"}})
	}
	for _, n := range needs {
		for _, argv := range n.Commands {
			if len(argv) > 0 {
				cs = append(cs, check{n.Feature, argv})
			}
		}
	}
	return cs
}

// probe reports, as a *refusedError wrapping ErrAuth, a user whom Redis's
// ACL keeps from what the store (and Options.Needs) runs, on any Cluster
// master; nil when it may, or when Redis could not tell (a timeout, an
// OOM, a Cluster moving the slot: decisions will say). New runs it (op
// "connect"), and Ping (op "ping"): a user's ACL may change while the
// store runs.
func (s *Store) probe(ctx context.Context, op string) error {
	return s.probeWith(ctx, op, *s.needs.Load())
}

// probeWith is probe with needs in place of the Store's.
func (s *Store) probeWith(ctx context.Context, op string, needs []Need) error {
	who := "the default user"
	if s.opts.Username != "" {
		who = fmt.Sprintf("user %q", s.opts.Username)
	}
	targets := []probeTarget{{key: s.Key("acl-probe")}}
	if s.opts.Cluster {
		ts, err := s.masterKeys(ctx)
		if ue := usernameRefusal(op, s.opts, err); ue != nil {
			return ue
		}
		if refusedCredentials(err) {
			return &refusedError{op: op, addrs: s.opts.Addrs, kind: ErrAuth, err: err,
				what: "Redis's ACL does not let " + who + " run CLUSTER SLOTS (the Cluster's slot map)"}
		}
		if err == nil {
			targets = ts
		}
	}
	var refusals []string // what each master refuses, "" for none
	var first error
	for _, t := range targets {
		cs := s.checks(t.key, needs)
		args := make([]string, 0, 4*len(cs))
		for _, c := range cs {
			args = append(append(args, strconv.Itoa(len(c.argv)), strconv.Itoa(c.nameLen())), c.argv...)
		}
		at := ""
		if t.addr != "" {
			at = " on master " + t.addr
		}
		bad, err := probeLua.Exec(ctx, s.c, []string{t.key}, args).AsIntSlice()
		if err != nil {
			if ue := usernameRefusal(op, s.opts, err); ue != nil {
				return ue // reconnected to a server older than the username
			}
			if refusedCredentials(err) {
				return &refusedError{op: op, addrs: s.opts.Addrs, what: "Redis's ACL" + at + " keeps " + who + " from running the store's scripts on its keys", kind: ErrAuth, err: err}
			}
			continue
		}
		if len(bad) == 0 {
			continue
		}
		var names []string
		for j := 0; j+1 < len(bad); j += 2 {
			i := bad[j]
			if i < 0 || int(i) >= len(cs) {
				continue
			}
			c := cs[i]
			n := c.name() + " (for " + c.feature + ")"
			if bad[j+1] == 2 {
				// The command is allowed, not on these keys.
				n = c.name() + " on the keys of `" + strings.Join(c.argv, " ") + "` (for " + c.feature + ")"
				if slices.Contains(channelCommands, c.name()) {
					n = c.name() + " on the channel " + strings.Join(c.argv[1:], " ") + " (for " + c.feature + ")"
				}
			}
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
		refusals = append(refusals, "Redis's ACL"+at+" does not let "+who+" run "+strings.Join(names, ", "))
		if first == nil {
			first = fmt.Errorf("NOPERM %s", cs[bad[0]].name())
		}
	}
	if len(refusals) > 0 {
		return &refusedError{op: op, addrs: s.opts.Addrs, kind: ErrAuth, what: strings.Join(refusals, "; "), err: first}
	}
	return nil
}

// Require checks, as New does with Options.Needs, that the servers are
// recent enough for needs (Need.MinRedis, against the versions New read,
// or the last RunIDs once called)
// and that Redis's ACL lets the user run what needs run (on every master
// of a Cluster), and when so, makes them the needs that Ping checks from
// then on, in place of Options.Needs (a caller whose features changed).
// It fails with ErrVersion naming the feature, the version it needs and
// the server's, or with ErrAuth naming the command, the feature and the
// master, and then leaves the needs as they were; nil when Redis could
// not tell.
func (s *Store) Require(ctx context.Context, needs []Need) error {
	ctx, cancel := context.WithTimeout(ctx, max(s.opts.Timeout, time.Second))
	defer cancel()
	if err := checkNeeds(needs); err != nil {
		return fmt.Errorf("redisstore: require: %w", err)
	}
	if err := tooOld("require", s.opts.Addrs, s.versions(), needs); err != nil {
		return err
	}
	if err := s.probeWith(ctx, "require", needs); err != nil {
		return err
	}
	s.needs.Store(&needs)
	return nil
}

// probeTarget is where the probe runs: key, in a slot of the master at
// addr ("": wherever key is).
type probeTarget struct{ addr, key string }

// masterKeys returns, for each master of the Cluster (CLUSTER SLOTS), a
// key under the prefix in one of its slots, so that the probe runs there.
func (s *Store) masterKeys(ctx context.Context) ([]probeTarget, error) {
	ranges, err := s.c.Do(ctx, s.c.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		return nil, err
	}
	var owner [16384]string
	var masters []string
	for _, r := range ranges {
		f, err := r.ToArray()
		if err != nil || len(f) < 3 {
			return nil, fmt.Errorf("redisstore: cluster slots: malformed range")
		}
		lo, err1 := f[0].AsInt64()
		hi, err2 := f[1].AsInt64()
		m, err3 := f[2].ToArray()
		if err1 != nil || err2 != nil || err3 != nil || len(m) < 2 || lo < 0 || hi > 16383 || lo > hi {
			return nil, fmt.Errorf("redisstore: cluster slots: malformed range")
		}
		host, _ := m[0].ToString()
		port, _ := m[1].AsInt64()
		addr := host + ":" + strconv.FormatInt(port, 10)
		if !slices.Contains(masters, addr) {
			masters = append(masters, addr)
		}
		for sl := lo; sl <= hi; sl++ {
			owner[sl] = addr
		}
	}
	slices.Sort(masters)
	key := map[string]string{}
	// A few keys per master find one in its slots: a master with no slot
	// in the first 1<<16 candidates holds too few to matter.
	for i := 0; i < 1<<16 && len(key) < len(masters); i++ {
		k := s.Key("acl-probe-" + strconv.Itoa(i))
		if a := owner[slot(k)]; a != "" && key[a] == "" {
			key[a] = k
		}
	}
	ts := make([]probeTarget, 0, len(masters))
	for _, a := range masters {
		if key[a] != "" {
			ts = append(ts, probeTarget{addr: a, key: key[a]})
		}
	}
	return ts, nil
}

// writableLua runs a write command that changes nothing (no state has
// the field): a replica refuses it (READONLY), as it refuses every
// decision, where PING and the ACL probe, which do not write, pass.
// HDEL is one of the scripts' commands, so the ACL lets the user run it.
var writableLua = rueidis.NewLuaScript(`return redis.call('HDEL', KEYS[1], 'sluice:writable')`)

// writable returns the error of Redis refusing a write (READONLY on a
// replica, or the like), else nil. A key of another type (WRONGTYPE)
// has taken the write command: nil.
func (s *Store) writable(ctx context.Context) error {
	err := writableLua.Exec(ctx, s.c, []string{s.Key("acl-probe")}, nil).Error()
	if re, ok := rueidis.IsRedisErr(err); ok && strings.Contains(re.Error(), "WRONGTYPE") { // Redis 7 starts with it, 5 and 6 with ERR
		return nil
	}
	return err
}
