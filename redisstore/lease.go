package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
)

// Grant is the answer to a lease request.
type Grant struct {
	// Units is how many units of quota were reserved (0 to want).
	Units int64
	// State is the key's state after the grant, and Now the time (µs) the
	// script decided at: with sluice.Algorithm.TakeMicro at Now they tell
	// what remains and when the next unit frees up.
	State sluice.State
	Now   int64
	// Clock is Now with Options.RedisTime (Redis' clock when the script
	// decided); 0 without (it decided at the request's Now), as for
	// Taken.Clock.
	Clock int64
}

// Lease reserves up to r.Cost units of r.Key's quota at r.Now (Redis' clock
// with Options.RedisTime), atomically: they are counted as taken, and the
// caller may admit that many requests on its own. It grants what is left
// when that is less than asked, down to 0. Before, it gives back the
// expired units of back, if any (back.Key, Algorithm and Limit are r's);
// with Options.PublishRefunds, a give-back that left the key counting
// less also publishes the key on RefundChannel, in the same script, as
// Refund does.
func (s *Store) Lease(ctx context.Context, r sluice.Request, back ReturnOp) (Grant, error) {
	now, err := s.nowArg(r.Now)
	if err != nil {
		return Grant{}, fmt.Errorf("redisstore: lease %q: %w", r.Key, err)
	}
	if r.Cost < 0 {
		return Grant{}, fmt.Errorf("redisstore: lease %q: %w: %d is negative", r.Key, sluice.ErrInvalidCost, r.Cost)
	}
	args, err := s.fleetArgs("grant", r.Algorithm, r.Limit, now, 5)
	if err != nil {
		return Grant{}, fmt.Errorf("redisstore: lease %q: %w", r.Key, err)
	}
	args = append(args, luaCost(r.Cost), strconv.FormatInt(max(0, back.Units), 10), strconv.FormatInt(back.Window, 10))
	if s.opts.PublishRefunds && back.Units > 0 {
		args = append(args, s.RefundChannel(), refundMessage(r.Namespace, r.Key))
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	g, err := grantReply(fleetLua.Exec(ctx, s.c, []string{s.KeyOf(&r)}, args))
	if err != nil {
		return Grant{}, fmt.Errorf("redisstore: lease %q: %w: %w", r.Key, sluice.ErrStoreUnavailable, err)
	}
	if s.opts.RedisTime {
		g.Clock = g.Now
	}
	return g, nil
}

func grantReply(res rueidis.RedisResult) (Grant, error) {
	var g Grant
	arr, err := res.ToArray()
	if err != nil {
		return g, err
	}
	if len(arr) != 3 {
		return g, fmt.Errorf("script returned %d values, want 3", len(arr))
	}
	var raw string
	if g.Units, err = arr[0].AsInt64(); err != nil {
		return g, err
	}
	if raw, err = arr[1].ToString(); err != nil {
		return g, err
	}
	if g.Now, err = arr[2].AsInt64(); err != nil {
		return g, err
	}
	g.State, err = parseState(raw)
	return g, err
}

// ReturnOp gives back Units of a lease not spent. Window is the State.T of
// the Grant, for the windows: units of a window that has passed are not
// given back (they expired with it).
type ReturnOp struct {
	Namespace string
	Key       string
	Algorithm sluice.Algorithm
	Limit     sluice.Limit
	Units     int64
	Window    int64
	Now       time.Time // the clock of the grant; ignored with Options.RedisTime
}

// Return gives back unspent leases, in one pipelined round trip. With
// Options.PublishRefunds, each key whose give-back left it counting less
// is published on RefundChannel, as Refund does: when ops name one key,
// by its script, atomically with the give-back; when they name several
// (a Lease's Close), after every script answered, many keys to a message
// in one more round trip, each message at most 64 KiB (a shutdown handing
// back 100,000 keys used to run 100,000 PUBLISH). A key whose script
// failed is published too: it may have run, and telling of a give-back
// that did not happen only costs the others a store call.
func (s *Store) Return(ctx context.Context, ops []ReturnOp) error {
	alone := s.opts.PublishRefunds && oneKey(ops)
	execs := make([]rueidis.LuaExec, 0, len(ops))
	names := make([]nsName, 0, len(ops))
	var errs []error
	for _, op := range ops {
		now, err := s.nowArg(op.Now)
		var args []string
		if err == nil {
			args, err = s.fleetArgs("return", op.Algorithm, op.Limit, now, 4)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("redisstore: return %q: %w", op.Key, err))
			continue
		}
		args = append(args, strconv.FormatInt(op.Units, 10), strconv.FormatInt(op.Window, 10))
		if alone {
			args = append(args, s.RefundChannel(), refundMessage(op.Namespace, op.Key))
		}
		execs = append(execs, rueidis.LuaExec{Keys: []string{s.KeyOf(&sluice.Request{Namespace: op.Namespace, Key: op.Key})}, Args: args})
		names = append(names, nsName{op.Namespace, op.Key})
	}
	if len(execs) == 0 {
		return errors.Join(errs...)
	}
	sctx, cancel := context.WithTimeout(ctx, s.opts.Timeout*time.Duration(1+len(execs)/1000))
	defer cancel()
	var gave []nsName
	told := map[nsName]bool{}
	for j, res := range execFleet(sctx, s.c, execs) {
		err := res.Error()
		if err != nil {
			errs = append(errs, fmt.Errorf("redisstore: return %q: %w: %w", execs[j].Keys[0], sluice.ErrStoreUnavailable, err))
		}
		if s.opts.PublishRefunds && !alone && (err != nil || gaveBack(res)) && !told[names[j]] {
			told[names[j]] = true
			gave = append(gave, names[j])
		}
	}
	if len(gave) > 0 {
		if err := s.publishRefunds(ctx, gave); err != nil {
			errs = append(errs, fmt.Errorf("redisstore: return: publishing %d keys given back: %w: %w", len(gave), sluice.ErrStoreUnavailable, err))
		}
	}
	return errors.Join(errs...)
}

// oneKey reports whether ops name one key at most.
func oneKey(ops []ReturnOp) bool {
	for i := 1; i < len(ops); i++ {
		if ops[i].Namespace != ops[0].Namespace || ops[i].Key != ops[0].Key {
			return false
		}
	}
	return true
}

// gaveBack reports whether a return script's reply says it gave units
// back; a reply it cannot read counts as yes.
func gaveBack(res rueidis.RedisResult) bool {
	arr, err := res.ToArray()
	if err != nil || len(arr) == 0 {
		return true
	}
	n, err := arr[0].AsInt64()
	return err != nil || n != 0
}

// publishRefunds publishes keys on RefundChannel, many to a message
// (refundBatches), in one pipelined round trip.
func (s *Store) publishRefunds(ctx context.Context, keys []nsName) error {
	msgs := refundBatches(keys)
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout*time.Duration(1+len(msgs)/100))
	defer cancel()
	cmds := make(rueidis.Commands, len(msgs))
	for i, m := range msgs {
		cmds[i] = s.c.B().Publish().Channel(s.RefundChannel()).Message(m).Build()
	}
	var errs []error
	for _, res := range s.c.DoMulti(ctx, cmds...) {
		if err := res.Error(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
