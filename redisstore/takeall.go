package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/sluicehq/sluice"
)

// TakeAll decides several requests as one: all are counted if every one is
// allowed, none otherwise. See the package documentation for how this is
// done across Cluster slots.
func (s *Store) TakeAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	if len(ds) != len(rs) {
		return fmt.Errorf("redisstore: take all: %d decisions for %d requests", len(ds), len(rs))
	}
	if len(rs) == 0 {
		return nil
	}
	qs := make([]request, len(rs))
	for i := range rs {
		if err := s.prepare(&rs[i], &qs[i]); err != nil {
			return fmt.Errorf("redisstore: take all %q: %w", rs[i].Key, err)
		}
	}
	ctx = s.deadlines.bound(ctx)
	groups := [][]int{make([]int, len(rs))}
	for i := range groups[0] {
		groups[0][i] = i
	}
	if s.opts.Cluster {
		groups = bySlot(qs)
	}
	if len(groups) == 1 {
		rps, err := s.run(ctx, "take", qs, groups[0], nil)
		if err != nil {
			return s.allErr(rs, err)
		}
		for j, i := range groups[0] {
			ds[i] = qs[i].decision(rps[j])
		}
		return nil
	}
	// Across slots: check everything without counting first, but for
	// reports alone (Force), which a check refuses none of: they are
	// taken at once, a round trip fewer.
	if !allForced(rs) {
		rps, err := s.runGroups(ctx, "check", qs, groups, nil)
		if err != nil {
			return s.allErr(rs, err)
		}
		allowed := true
		for gi, g := range groups {
			for j, i := range g {
				ds[i] = qs[i].decision(rps[gi][j])
				allowed = allowed && (rps[gi][j].allowed || rs[i].Force)
			}
		}
		if !allowed {
			return nil
		}
		if testHookAfterCheck != nil {
			testHookAfterCheck()
		}
	}
	// Then take each slot's share; refund if some slot changed its mind
	// (or failed).
	rps, err := s.runGroups(ctx, "take", qs, groups, nil)
	if testHookAfterTake != nil {
		testHookAfterTake()
	}
	committed := make([]bool, len(groups))
	denied := err != nil
	for gi, g := range groups {
		if rps[gi] == nil {
			continue
		}
		committed[gi] = true
		for j, i := range g {
			ds[i] = qs[i].decision(rps[gi][j])
			if !rps[gi][j].allowed && !rs[i].Force {
				committed[gi] = false
				denied = true
			}
		}
	}
	if !denied {
		return nil
	}
	var refund [][]int
	var marks [][]reply
	for gi, g := range groups {
		if committed[gi] {
			refund = append(refund, g)
			marks = append(marks, rps[gi])
		}
	}
	if len(refund) > 0 {
		s.refunds.Add(1)
		// The refund must happen even if the caller's context is done.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.Timeout)
		defer rcancel()
		if _, rerr := s.runGroups(rctx, "refund", qs, refund, marks); rerr != nil && err == nil {
			err = fmt.Errorf("refund: %w", rerr)
		}
	}
	if err != nil {
		return s.allErr(rs, err)
	}
	return nil
}

// allForced reports whether every request of rs is a report (Force).
func allForced(rs []sluice.Request) bool {
	for i := range rs {
		if !rs[i].Force {
			return false
		}
	}
	return true
}

// testHookAfterCheck and testHookAfterTake, set by tests only, run in a
// cross-slot TakeAll after its check and after its take, so that a test
// can put another client's requests between the phases; testHookAfterCheck
// also runs in ReadCounters between its checks and its takes.
var testHookAfterCheck, testHookAfterTake func()

func (s *Store) allErr(rs []sluice.Request, err error) error {
	keys := make([]string, len(rs))
	for i := range rs {
		keys[i] = rs[i].Key
	}
	return fmt.Errorf("redisstore: take all %q: %w: %w", keys, sluice.ErrStoreUnavailable, err)
}

// run executes the all-algorithms script over the requests qs[g...]. A
// refund with Options.PublishRefunds also publishes each key given back
// on RefundChannel, in the script, as Refund does.
func (s *Store) run(ctx context.Context, mode string, qs []request, g []int, marks []reply) ([]reply, error) {
	keys, args, n := s.runArgs(mode, qs, g, marks)
	return s.exec(ctx, s.all, keys, args, n)
}

// runArgs returns the keys and arguments of the all-algorithms script
// over the requests qs[g...] in mode (see run), and how many replies it
// returns.
func (s *Store) runArgs(mode string, qs []request, g []int, marks []reply) (keys, args []string, replies int) {
	keys = make([]string, len(g))
	publish := mode == "refund" && s.opts.PublishRefunds
	n := 3 + 9*len(g)
	if publish {
		n += 1 + len(g)
	}
	args = make([]string, 0, n)
	args = append(args, mode, s.useTime, s.margin)
	for j, i := range g {
		keys[j] = qs[i].key
		a := qs[i].args
		if marks != nil {
			a[8] = strconv.FormatInt(marks[j].mark, 10)
		}
		args = append(args, a[:]...)
	}
	if publish {
		args = append(args, s.RefundChannel())
		for _, i := range g {
			args = append(args, refundMessage(qs[i].ns, qs[i].name))
		}
	}
	if mode == "refund" {
		return keys, args, 0
	}
	return keys, args, len(g)
}

// runGroups runs one script per group, in parallel. A group whose script
// failed has a nil reply; the first error is returned.
func (s *Store) runGroups(ctx context.Context, mode string, qs []request, groups [][]int, marks [][]reply) ([][]reply, error) {
	out := make([][]reply, len(groups))
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for gi, g := range groups {
		var m []reply
		if marks != nil {
			m = marks[gi]
		}
		wg.Go(func() { out[gi], errs[gi] = s.run(ctx, mode, qs, g, m) })
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// bySlot groups request indexes by Cluster slot, in order of first use.
func bySlot(qs []request) [][]int {
	var groups [][]int
	at := map[uint16]int{}
	for i := range qs {
		sl := slot(qs[i].key)
		gi, ok := at[sl]
		if !ok {
			gi = len(groups)
			at[sl] = gi
			groups = append(groups, nil)
		}
		groups[gi] = append(groups[gi], i)
	}
	return groups
}

// slot is Redis Cluster's HASH_SLOT of key: CRC16 (XMODEM) of the hash tag,
// if the key has a non-empty one, else of the whole key, mod 16384.
func slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc & 16383
}
