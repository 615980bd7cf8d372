package redisstore

import (
	"embed"
	"strings"

	"github.com/sluicehq/sluice"
)

//go:embed *.lua
var luaFS embed.FS

// scripts[a] is the general Take script of algorithm a (one.lua; for the
// sliding log, log_take.lua, which keeps one.lua's arguments and reply);
// flatScripts[a] the flat one (take_head.lua) for the algorithms with a
// string state ("" for the sliding log); scriptAll holds every algorithm,
// for TakeAll.
var (
	scripts     [sluice.GCRA + 1]string
	flatScripts [sluice.GCRA + 1]string
	scriptAll   string
	allScript   pipedScript // scriptAll, for a pipeline (ReadCounters)
)

var algFiles = [...]string{
	sluice.TokenBucket:          "token_bucket.lua",
	sluice.LeakyBucket:          "leaky_bucket.lua",
	sluice.FixedWindow:          "fixed_window.lua",
	sluice.SlidingWindowLog:     "sliding_window_log.lua",
	sluice.SlidingWindowCounter: "sliding_window_counter.lua",
	sluice.GCRA:                 "gcra.lua",
}

func init() {
	read := func(name string) string {
		b, err := luaFS.ReadFile(name)
		if err != nil {
			panic(err) // embedded: cannot happen
		}
		return string(b)
	}
	prelude, fields, debt := read("prelude.lua"), read("fields.lua"), read("debt.lua")
	all := []string{prelude, fields, debt}
	for _, a := range sluice.Algorithms() {
		parts := []string{prelude}
		switch a {
		case sluice.TokenBucket, sluice.GCRA:
			parts = append(parts, debt)
		case sluice.SlidingWindowLog, sluice.SlidingWindowCounter:
			parts = append(parts, fields)
		}
		parts = append(parts, read(algFiles[a]), read("one.lua"))
		scripts[a] = strings.Join(parts, "\n")
		if a == sluice.SlidingWindowLog {
			// Take's own flat script, on the same hash (log_take.lua).
			scripts[a] = read("log_take.lua")
		}
		all = append(all, read(algFiles[a]))
		if a != sluice.SlidingWindowLog {
			flatScripts[a] = strings.Join([]string{read("take_head.lua"), read("take_" + algFiles[a]), read("take_tail.lua")}, "\n")
		}
	}
	scriptAll = strings.Join(append(all, read("refund.lua"), read("main.lua")), "\n")
	allScript = newPipedScript(scriptAll)
}

// Script returns the Lua source that Take runs for algorithm a (as sent to
// EVALSHA), for benchmarks and inspection: for the sliding window counter,
// the one with Segments 1; "" for an invalid algorithm. See take_head.lua
// for its arguments.
func Script(a sluice.Algorithm) string {
	if !a.Valid() {
		return ""
	}
	if flatScripts[a] != "" {
		return flatScripts[a]
	}
	return scripts[a]
}
