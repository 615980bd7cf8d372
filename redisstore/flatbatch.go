package redisstore

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
)

// Batching concurrent Takes (single Redis node)
//
// Each Take is one script call, and Redis spends a few µs per call beyond
// the script's own work (reading the command, finding the script, setting
// up Lua, writing the reply), as does the client. While a Take's script
// call is in flight, the Takes that arrive for the same algorithm wait and
// then go together, as one call of a batch script that runs each one's
// flat script in turn (flatBatchScript). Every request still gets its own
// decision, in one script run (atomic), in one round trip; a batch is one
// call, so requests denied in it consume nothing, as alone. A lone Take
// (nothing in flight) is sent at once, alone, as before. Only one batch
// per algorithm is in flight at a time: the next one gathers meanwhile.
// A Redis Cluster is not batched (one request's key decides its node).
//
// Bounds: a waiting Take gives up at its own deadline (Options.Timeout, or
// its caller's sooner one) if its batch has not started; a batch call is
// bounded by the deadline of its oldest Take, so no Take in it waits past
// its own.

// flatCall is one flat Take, alone or waiting for its batch. They are
// pooled: done is a semaphore (one signal per wait), not closed, so that
// it serves again.
type flatCall struct {
	key      string
	args     []string // argv[:n]
	argv     [9]string
	deadline time.Time // the Take's own bound
	raw      string    // the state read
	us       int64     // the time used (µs), with Redis' clock
	err      error
	lead     []*flatCall   // set on a waiting call: run this batch, then hand over
	done     chan struct{} // capacity 1: the batch is done, or lead is set
}

var flatCalls = sync.Pool{New: func() any { return &flatCall{done: make(chan struct{}, 1)} }}

func getFlatCall() *flatCall { return flatCalls.Get().(*flatCall) }

// putFlatCall returns c to the pool once no batch refers to it.
func putFlatCall(c *flatCall) {
	done := c.done
	*c = flatCall{done: done}
	flatCalls.Put(c)
}

type flatBatcher struct {
	mu      sync.Mutex
	busy    bool
	queue   []*flatCall
	batches atomic.Uint64 // batch script calls of more than one Take (tests)
}

// takeBatched decides the flat Take c (key, args and us set), alone or
// with others waiting, and sets its raw, us and err.
func (s *Store) takeBatched(ctx context.Context, alg sluice.Algorithm, c *flatCall) {
	b := &s.batchers[alg]
	b.mu.Lock()
	if !b.busy {
		b.busy = true
		b.mu.Unlock()
		one := [1]*flatCall{c}
		s.runFlatBatch(ctx, alg, one[:], c)
		return
	}
	w := s.deadlines.waitBound(ctx)
	c.deadline = w.deadline()
	b.queue = append(b.queue, c)
	b.mu.Unlock()
	select {
	case <-c.done:
	case <-w.done():
		b.mu.Lock()
		for i, q := range b.queue {
			if q == c { // not taken yet: leave
				b.queue = append(b.queue[:i], b.queue[i+1:]...)
				b.mu.Unlock()
				c.raw, c.us, c.err = "", 0, w.err()
				return
			}
		}
		b.mu.Unlock()
		<-c.done // taken into a batch (bounded by its own deadline)
	}
	if c.lead != nil {
		s.runFlatBatch(ctx, alg, c.lead, c)
	}
}

// runFlatBatch runs calls (self, the caller's own, among them) as one
// script call, then hands the calls that gathered meanwhile to the first
// of them.
func (s *Store) runFlatBatch(ctx context.Context, alg sluice.Algorithm, calls []*flatCall, self *flatCall) {
	if len(calls) == 1 {
		c := calls[0]
		c.raw, c.us, c.err = s.flatOne(ctx, alg, c.key, c.args, c.us)
	} else {
		s.flatMany(alg, calls)
	}
	b := &s.batchers[alg]
	b.mu.Lock()
	next := b.queue
	b.queue = nil
	if len(next) == 0 {
		b.busy = false
	}
	b.mu.Unlock()
	for _, c := range calls {
		if c != self { // self was signalled already to make it lead, or never waited
			c.done <- struct{}{}
		}
	}
	if len(next) > 0 {
		next[0].lead = next
		next[0].done <- struct{}{}
	}
}

// flatMany runs several calls in one batch script call, bounded by the
// first (oldest) call's deadline; no caller's cancellation fails the
// others.
func (s *Store) flatMany(alg sluice.Algorithm, calls []*flatCall) {
	s.batchers[alg].batches.Add(1)
	keys := make([]string, len(calls))
	args := make([]string, 0, len(calls)*len(calls[0].args))
	for i, c := range calls {
		keys[i] = c.key
		args = append(args, c.args...)
	}
	ctx, cancel := context.WithDeadline(context.Background(), calls[0].deadline)
	defer cancel()
	cl, done := s.client()
	res := s.flatBatch[alg].Exec(ctx, cl, keys, args)
	done()
	arr, err := res.ToArray()
	if err == nil && len(arr) != 2*len(calls) {
		err = fmt.Errorf("batch script returned %d values for %d requests", len(arr), len(calls))
	}
	for i, c := range calls {
		if err != nil {
			c.err = err
			continue
		}
		if c.raw, c.err = arr[2*i].ToString(); c.err != nil {
			continue
		}
		if s.opts.RedisTime {
			c.us, c.err = arr[2*i+1].AsInt64()
		}
	}
}

// flatOne runs one flat script call: the state read and the time used.
func (s *Store) flatOne(ctx context.Context, alg sluice.Algorithm, key string, args []string, us int64) (string, int64, error) {
	ctx = s.deadlines.bound(ctx)
	c, done := s.client()
	res := s.flat[alg].Exec(ctx, c, []string{key}, args)
	done()
	if s.opts.RedisTime {
		return clockReply(res)
	}
	raw, err := res.ToString()
	if rueidis.IsRedisNil(err) {
		raw, err = "", nil
	}
	return raw, us, err
}

var (
	argvRef   = regexp.MustCompile(`ARGV\[(\d+)\]`)
	flatTail  = "if clock then return {v or '', us} end\nreturn v"
	batchTail = "out[2 * i - 1] = v or ''\nout[2 * i] = clock and us or 0"
	flatTime  = "local t = redis.call('TIME')"
	batchTime = "if not batchTime then batchTime = redis.call('TIME') end\n  local t = batchTime"
)

// flatBatchScript turns a flat script (take_head.lua + one algorithm +
// take_tail.lua) into one that runs it for every key in turn, each with its
// own arguments (the same number for each), and returns, per key, the
// state read (” for none) and the time used (0 without Redis' clock).
// With Redis' clock the batch reads TIME once, for its first request that
// asks, and decides every request at that instant, as TakeAll's script
// does for its requests: the batch is one atomic script run, so its
// requests are decided at one instant either way, and Redis runs one
// command fewer per decision (TIME, GET and SET become GET and SET).
func flatBatchScript(flat string) string {
	if !strings.Contains(flat, flatTail) || !strings.Contains(flat, "KEYS[1]") || strings.Count(flat, flatTime) != 1 {
		panic("redisstore: the flat script's shape changed; update flatBatchScript")
	}
	body := strings.Replace(flat, flatTail, batchTail, 1)
	body = strings.Replace(body, flatTime, batchTime, 1)
	body = strings.ReplaceAll(body, "KEYS[1]", "KEYS[i]")
	body = argvRef.ReplaceAllString(body, "ARGV[a + $1]")
	return "local out, stride, batchTime = {}, #ARGV / #KEYS, nil\nfor i = 1, #KEYS do\nlocal a = (i - 1) * stride\n" + body + "\nend\nreturn out\n"
}
