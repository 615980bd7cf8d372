package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
)

// Reading counters together
//
// A caller that reads many counters at once (the daemon settling the keys
// shards: auto moved: at each refresh, it reads again every counter a
// move left) spent a round trip on each call, reading after reading: a
// sliding log's LoggedSince, the questions' TakeAll (two across Cluster
// slots), every other counter's CounterState. Readings only ask
// (cost 0: a question changes nothing another reading reads), so they are
// independent: ReadCounters sends them together, each node's calls in one
// pipeline (on a Cluster, a pipeline per master, in parallel), in the
// round trips one reading needs: one, or two when a reading's requests
// span Cluster slots (checked, then taken, as TakeAll does; then a
// third, for TakeAll's refund, should a slot deny after its check). A
// node runs a reading's calls in the order of the calls one by one: the
// units logged, the questions, the states. A call that a node answers
// NOSCRIPT (restarted, failed over, its scripts flushed) ran nothing and
// is sent again after the others: as the questions changed nothing, it
// reads what it would have.

// Reading is one reading of counters for ReadCounters: Requests, questions
// (cost 0) decided together as TakeAll decides them, and what a
// Decision does not tell: for each sliding_window_log request, the units
// it logged after After[i] (LoggedSince, asked before the requests are
// decided); for each other request, its state (CounterState, read after).
// Either comes with the instant it was read at, on the clock of the
// key's decisions: what a counter regains between two readings is
// reckoned on that clock, not the caller's.
type Reading struct {
	Requests []sluice.Request
	// After is LoggedSince's after for each request (read for a
	// sliding_window_log only); nil is -1 for every one.
	After []int64

	// Set by ReadCounters, one per request, as the calls one by one
	// return them: TakeAll's Decisions; LoggedSince's Units and
	// CounterState's States (the zero State for a sliding_window_log);
	// the instant either read at (µs), in Clocks. Err is the first failure of those
	// calls, in their order; what follows it is not to be read.
	Decisions []sluice.Decision
	Units     []int64
	States    []sluice.State
	Clocks    []int64
	Err       error
}

// ReadCounters reads each of rs as LoggedSince, TakeAll and CounterState
// called one after another would (see Reading), but together (see
// above). One reading's failure is its own; a reading with a request of a
// cost other than 0 fails (ErrInvalidCost), having read nothing.
func (s *Store) ReadCounters(ctx context.Context, rs []Reading) {
	ops := make([]*readOp, 0, len(rs))
	for i := range rs {
		if op := s.readOp(&rs[i]); op != nil {
			ops = append(ops, op)
		}
	}
	var first, second pipeline
	for _, op := range ops {
		op.addLogs(&first)
		if len(op.groups) > 1 {
			op.addCheck(&first)
		} else {
			op.addTake(&first)
			op.addStates(&first)
		}
	}
	s.runPipeline(ctx, &first)
	for _, op := range ops {
		if op.rd.Err == nil && len(op.groups) > 1 {
			if op.allowed {
				op.addTake(&second)
			}
			op.addStates(&second)
		}
	}
	if testHookAfterCheck != nil && len(second.calls) > 0 {
		testHookAfterCheck()
	}
	s.runPipeline(ctx, &second)
	for _, op := range ops {
		if op.refund != nil {
			s.refundReading(ctx, op)
		}
	}
}

// readOp is one reading in progress.
type readOp struct {
	s       *Store
	rd      *Reading
	qs      []request
	groups  [][]int // the requests by Cluster slot (one group off a Cluster)
	logs    []int   // the sliding_window_log requests
	states  []int   // the other requests
	allowed bool    // every request allowed by the check (across slots)
	// After the take across slots: the replies per group, nil for a group
	// that failed, and the error; refund set when some groups must give
	// back what they counted, as TakeAll does.
	taken   [][]reply
	takeErr []error
	refund  [][]int
	marks   [][]reply
}

// readOp checks rd and returns its reading, or nil with rd.Err set.
func (s *Store) readOp(rd *Reading) *readOp {
	n := len(rd.Requests)
	rd.Decisions, rd.Units, rd.States, rd.Clocks, rd.Err = make([]sluice.Decision, n), make([]int64, n), make([]sluice.State, n), make([]int64, n), nil
	if rd.After != nil && len(rd.After) != n {
		rd.Err = fmt.Errorf("redisstore: read counters: %d instants after for %d requests", len(rd.After), n)
		return nil
	}
	if n == 0 {
		return nil
	}
	op := &readOp{s: s, rd: rd, qs: make([]request, n)}
	for i := range rd.Requests {
		if err := s.prepare(&rd.Requests[i], &op.qs[i]); err != nil {
			rd.Err = fmt.Errorf("redisstore: take all %q: %w", rd.Requests[i].Key, err)
			return nil
		}
		if c := rd.Requests[i].Cost; c != 0 {
			rd.Err = fmt.Errorf("redisstore: read counters %q: %w: cost %d, where a reading only asks (cost 0)", rd.Requests[i].Key, sluice.ErrInvalidCost, c)
			return nil
		}
		if rd.Requests[i].Algorithm == sluice.SlidingWindowLog {
			op.logs = append(op.logs, i)
		} else {
			op.states = append(op.states, i)
		}
	}
	op.groups = [][]int{make([]int, n)}
	for i := range op.groups[0] {
		op.groups[0][i] = i
	}
	if s.opts.Cluster {
		op.groups = bySlot(op.qs)
	}
	return op
}

// fail notes err as the reading's failure unless one came first.
func (op *readOp) fail(err error) {
	if op.rd.Err == nil {
		op.rd.Err = err
	}
}

// addLogs adds LoggedSince's calls.
func (op *readOp) addLogs(p *pipeline) {
	for _, i := range op.logs {
		r := &op.rd.Requests[i]
		after := int64(-1)
		if op.rd.After != nil {
			after = op.rd.After[i]
		}
		key, args, err := op.s.logSinceArgs(r, after)
		if err != nil {
			op.fail(err)
			continue
		}
		p.add(&logSinceScript, []string{key}, args, func(res rueidis.RedisResult) {
			units, now, err := logSinceReply(r, res)
			if err != nil {
				op.fail(err)
				return
			}
			op.rd.Units[i], op.rd.Clocks[i] = units, now
		})
	}
}

// addStates adds CounterState's calls.
func (op *readOp) addStates(p *pipeline) {
	for _, i := range op.states {
		r := &op.rd.Requests[i]
		key, args, segs, err := op.s.counterStateArgs(r)
		if err != nil {
			op.fail(err)
			continue
		}
		p.add(&counterStateScript, []string{key}, args, func(res rueidis.RedisResult) {
			st, now, err := counterStateReply(r, segs, res)
			if err != nil {
				op.fail(err)
				return
			}
			op.rd.States[i], op.rd.Clocks[i] = st, now
		})
	}
}

// addCheck adds the check of every group (TakeAll across slots), which
// sets allowed.
func (op *readOp) addCheck(p *pipeline) {
	op.allowed = true
	var errs []error
	left := len(op.groups)
	for _, g := range op.groups {
		keys, args, n := op.s.runArgs("check", op.qs, g, nil)
		p.add(&allScript, keys, args, func(res rueidis.RedisResult) {
			rps, err := replies(res, n)
			if err != nil {
				errs = append(errs, err)
				op.allowed = false
			}
			for j, i := range g {
				if err == nil {
					op.rd.Decisions[i] = op.qs[i].decision(rps[j])
					op.allowed = op.allowed && (rps[j].allowed || op.rd.Requests[i].Force)
				}
			}
			if left--; left == 0 && len(errs) > 0 {
				op.fail(op.s.allErr(op.rd.Requests, errors.Join(errs...)))
			}
		})
	}
}

// addTake adds the take of every group: of the only one, or across slots
// after a check that allowed every request (TakeAll).
func (op *readOp) addTake(p *pipeline) {
	if len(op.groups) == 1 {
		g := op.groups[0]
		keys, args, n := op.s.runArgs("take", op.qs, g, nil)
		p.add(&allScript, keys, args, func(res rueidis.RedisResult) {
			rps, err := replies(res, n)
			if err != nil {
				op.fail(op.s.allErr(op.rd.Requests, err))
				return
			}
			for j, i := range g {
				op.rd.Decisions[i] = op.qs[i].decision(rps[j])
			}
		})
		return
	}
	op.taken, op.takeErr = make([][]reply, len(op.groups)), make([]error, len(op.groups))
	left := len(op.groups)
	for gi, g := range op.groups {
		keys, args, n := op.s.runArgs("take", op.qs, g, nil)
		p.add(&allScript, keys, args, func(res rueidis.RedisResult) {
			op.taken[gi], op.takeErr[gi] = replies(res, n)
			if left--; left == 0 {
				op.tookAll()
			}
		})
	}
}

// tookAll reads the takes across slots as TakeAll does: the decisions,
// and which groups to refund when another denied or failed.
func (op *readOp) tookAll() {
	denied := false
	committed := make([]bool, len(op.groups))
	for gi, g := range op.groups {
		if op.taken[gi] == nil {
			denied = true
			continue
		}
		committed[gi] = true
		for j, i := range g {
			rp := op.taken[gi][j]
			op.rd.Decisions[i] = op.qs[i].decision(rp)
			if !rp.allowed && !op.rd.Requests[i].Force {
				committed[gi] = false
				denied = true
			}
		}
	}
	if !denied {
		return
	}
	op.refund = [][]int{}
	for gi, g := range op.groups {
		if committed[gi] {
			op.refund = append(op.refund, g)
			op.marks = append(op.marks, op.taken[gi])
		}
	}
}

// refundReading gives back what op's take counted on the slots that did
// count when another denied or failed, as TakeAll does, and reads the
// states again after it (rare: another client's request came between the
// check and the take).
func (s *Store) refundReading(ctx context.Context, op *readOp) {
	err := errors.Join(op.takeErr...)
	if len(op.refund) > 0 {
		s.refunds.Add(1)
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.Timeout)
		defer rcancel()
		if _, rerr := s.runGroups(rctx, "refund", op.qs, op.refund, op.marks); rerr != nil && err == nil {
			err = fmt.Errorf("refund: %w", rerr)
		}
	}
	// The take's failure comes before the states' (TakeAll's call before
	// CounterState's), and the states read with the take are read again.
	if op.rd.Err = nil; err != nil {
		op.rd.Err = s.allErr(op.rd.Requests, err)
		return
	}
	for _, i := range op.states {
		op.rd.States[i], op.rd.Clocks[i], err = s.CounterState(ctx, op.rd.Requests[i])
		if err != nil {
			op.fail(err)
			return
		}
	}
}
