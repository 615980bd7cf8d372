package deferq

import (
	"regexp"
	"slices"
	"strings"
)

// Commands returns the Redis commands a queue with Options.Prefix prefix
// runs on a rule's keys, each as Redis's ACL reads it (the name, the
// subcommand, the arguments with the keys in place: what
// redisstore.Need.Commands holds), so that a user whose ACL lacks one is
// told at startup rather than by every deferral failing. Those of the
// scripts are read from the scripts themselves, so the list cannot drift
// from them; the scripts (EVALSHA, then EVAL) on each of the rule's keys,
// and the commands the queue sends by itself, are added.
func Commands(prefix string) [][]string {
	b := prefix + "{" + Tag("acl-probe") + "}:"
	keyOf := map[string]string{"q": b + "q", "dead": b + "dead", "s": b + "s:id", "k": b + "k:h", "r": b + "r:t", "i": b + "i", "scan": b + "scan", "records": b + "records"}
	var cmds [][]string
	add := func(argv []string) {
		for _, c := range cmds {
			if slices.Equal(c, argv) {
				return
			}
		}
		cmds = append(cmds, argv)
	}
	for _, k := range []string{"q", "dead", "s", "k", "r", "i", "scan", "records"} {
		add([]string{"EVALSHA", strings.Repeat("0", 40), "1", keyOf[k]})
		add([]string{"EVAL", "return 0", "1", keyOf[k]})
	}
	for _, sc := range scriptsKeys {
		for _, argv := range scriptCalls(sc.src) {
			for i, a := range argv {
				if k, ok := argKey(a, sc.keys); ok {
					argv[i] = keyOf[k]
				}
			}
			add(argv)
		}
	}
	// Sent by the queue itself: the group (worker.go, reader.go), Depth
	// (metrics.go), Status (status.go).
	add([]string{"XGROUP", "CREATE", keyOf["q"], group, "0", "MKSTREAM"})
	add([]string{"XLEN", keyOf["q"]})
	add([]string{"XRANGE", keyOf["q"], "-", "+"})
	add([]string{"HGETALL", keyOf["s"]})
	return cmds
}

// scriptsKeys are the scripts with the kind of each of their KEYS, as
// their callers pass them: q the stream, dead the dead-letter stream, s
// a request's hash, k a limiter key's list, r a read's record, i the
// stream-id index, scan the state of the scan for requests queued by an
// earlier version, records the cursor of the pass over the rule's
// records.
var scriptsKeys = []struct {
	src  string
	keys []string
}{
	{enqueueLua, []string{"q", "s", "k", "i"}},
	{beginLua, []string{"q", "s", "k", "i"}},
	{finishLua, []string{"q", "s", "k", "dead", "i"}},
	{keepLua, []string{"q"}},
	{pruneLua, []string{"q"}},
	{malformedLua, []string{"q", "dead", "i", "s", "k"}},
	{forgetLua + readLua, []string{"q", "i", "r", "r"}},
	{releaseLua, []string{"q"}},
	{statusLua, []string{"s", "q", "i"}},
	{forgetLua + sweepLua, []string{"q", "i"}},
	{scanLua, []string{"q", "i", "scan"}},
	{listedLua, []string{"i", "scan"}},
	{recordsLua, []string{"q", "i", "records"}},
}

// computedKeys are the keys scripts build rather than take in KEYS, by
// the expression that builds them: begin.lua reads the hash of the
// request ahead of it in its key's list; status.lua and read.lua take a
// request found gone out of its key's list (listKey, named by its
// record); read.lua deletes the record of a request it finds trimmed
// away (recKey, named by the stream-id index); scan.lua reads the record
// of each request it indexes, and listed.lua takes its records' keys
// (recKey) from KEYS, looping over them; records.lua reads and deletes
// the records SCAN finds (recKey) and takes them out of their keys'
// lists (listKey).
var computedKeys = map[string]string{"base .. head": "s", "listKey": "k", "recKey": "s"}

var (
	callRe = regexp.MustCompile(`redis\.p?call\(((?:[^()]|\([^()]*\))*)\)`)
	keysRe = regexp.MustCompile(`^KEYS\[(\d)\]$`)
)

// argKey returns the kind of key argument a is (KEYS[n], or a computed
// key), given the kinds of the script's KEYS.
func argKey(a string, keys []string) (string, bool) {
	if k, ok := computedKeys[a]; ok {
		return k, true
	}
	m := keysRe.FindStringSubmatch(a)
	if m == nil {
		return "", false
	}
	i := int(m[1][0] - '1')
	if i < 0 || i >= len(keys) {
		return "", false
	}
	return keys[i], true
}

// scriptCalls returns the commands src calls, each its arguments as
// written: a quoted literal unquoted, anything else (KEYS[1], ARGV[2],
// unpack(f)) as it is, to be replaced (keys) or left (a value the ACL
// does not read).
func scriptCalls(src string) [][]string {
	var calls [][]string
	for _, m := range callRe.FindAllStringSubmatch(src, -1) {
		var argv []string
		depth, start := 0, 0
		args := m[1]
		for i := 0; i <= len(args); i++ {
			if i < len(args) {
				switch args[i] {
				case '(':
					depth++
					continue
				case ')':
					depth--
					continue
				case ',':
					if depth > 0 {
						continue
					}
				default:
					continue
				}
			}
			a := strings.TrimSpace(args[start:i])
			if len(a) >= 2 && a[0] == '\'' && a[len(a)-1] == '\'' {
				a = a[1 : len(a)-1]
			}
			argv = append(argv, a)
			start = i + 1
		}
		if len(argv) > 0 {
			argv[0] = strings.ToUpper(argv[0])
			calls = append(calls, argv)
		}
	}
	return calls
}
