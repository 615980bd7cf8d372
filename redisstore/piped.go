package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"time"

	"github.com/redis/rueidis"
)

// pipedScript is a script to run pipelined: its text, and its SHA-1 for
// EVALSHA.
type pipedScript struct{ body, sha string }

func newPipedScript(body string) pipedScript {
	h := sha1.Sum([]byte(body))
	return pipedScript{body: body, sha: hex.EncodeToString(h[:])}
}

// scriptCall is one call of a script in a pipeline.
type scriptCall struct {
	script     *pipedScript
	keys, args []string
}

// execScripts runs calls pipelined (on a Cluster, each on its key's node,
// a pipeline per node, in parallel; a node runs its calls in their order):
// EVALSHA, then EVAL for those a server answered NOSCRIPT (it never ran
// the script: restarted, failed over, SCRIPT FLUSH), which ran nothing,
// so ran after the others that time. rueidis.Lua.ExecMulti first loads
// the script on every node, and fails every call when one node does not
// answer: a batch then cost two round trips, and on a Cluster with one
// master (or one replica) down, nothing ran on the others either.
func execScripts(ctx context.Context, c rueidis.Client, calls []scriptCall) []rueidis.RedisResult {
	cmds := make(rueidis.Commands, 0, len(calls))
	for _, e := range calls {
		cmds = append(cmds, c.B().Evalsha().Sha1(e.script.sha).Numkeys(int64(len(e.keys))).Key(e.keys...).Arg(e.args...).Build())
	}
	res := c.DoMulti(ctx, cmds...)
	var again []int
	for i, r := range res {
		if err, ok := rueidis.IsRedisErr(r.Error()); ok && err.IsNoScript() {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return res
	}
	cmds = make(rueidis.Commands, 0, len(again))
	for _, i := range again {
		e := calls[i]
		cmds = append(cmds, c.B().Eval().Script(e.script.body).Numkeys(int64(len(e.keys))).Key(e.keys...).Arg(e.args...).Build())
	}
	for j, r := range c.DoMulti(ctx, cmds...) {
		res[again[j]] = r
	}
	return res
}

// pipeline gathers script calls for execScripts, each with the function
// that reads its result.
type pipeline struct {
	calls []scriptCall
	reads []func(rueidis.RedisResult)
}

func (p *pipeline) add(script *pipedScript, keys, args []string, read func(rueidis.RedisResult)) {
	p.calls = append(p.calls, scriptCall{script: script, keys: keys, args: args})
	p.reads = append(p.reads, read)
}

// runPipeline sends p's calls, bounded by pipelineTimeout, and reads their
// results in their order.
func (s *Store) runPipeline(ctx context.Context, p *pipeline) {
	if len(p.calls) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, s.pipelineTimeout(len(p.calls)))
	defer cancel()
	for i, r := range execScripts(ctx, s.c, p.calls) {
		p.reads[i](r)
	}
}

// pipelineShare is how many calls of a pipeline share one Options.Timeout.
const pipelineShare = 64

// pipelineTimeout bounds a pipeline of n calls: the timeout for every
// pipelineShare of them. One timeout for them all would fail every call
// of a large pipeline on a loaded Redis, where each call alone gets its
// answer in time (a script of the readings takes ~50 µs, so a pipeline
// of a thousand on one node alone takes its 50 ms); the caller's context
// bounds them all still.
func (s *Store) pipelineTimeout(n int) time.Duration {
	return s.opts.Timeout * time.Duration((n+pipelineShare-1)/pipelineShare)
}
