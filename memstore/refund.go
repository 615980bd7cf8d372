package memstore

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice"
)

var _ sluice.Refunder = (*Store)(nil)

// Refund gives r.Cost units back to r's key under its shard's lock
// (sluice.Refunder, sluice.Algorithm.Refund). A key absent or at rest has
// nothing to give back: it is not stored, so a refund never makes room for
// itself by evicting another key. It never blocks on I/O and ignores ctx.
func (s *Store) Refund(_ context.Context, r sluice.Request) (sluice.Decision, error) {
	now := r.Now.UnixMicro()
	h, ns := s.hash(r.Namespace, r.Key)
	sh := &s.shards[h&s.mask]
	var d sluice.Decision
	var err error
	sh.mu.Lock()
	if r.Algorithm.UsesLog(r.Limit) {
		var buf [maxStackKey]byte
		key := logKey(ns, r.Key, &buf)
		le := sh.logs[key]
		var st sluice.State
		if le != nil && now < le.idle {
			st = le.st
		}
		var idle int64
		if idle, err = r.Algorithm.RefundMicro(&d, &st, &r.Limit, now, r.Cost); err == nil && le != nil && now < le.idle {
			s.putLog(sh, key, le, st, idle, now)
		}
	} else {
		e := sh.small.get(h, ns, r.Key)
		var st sluice.State
		if e != nil && now < e.idle {
			st = sluice.State{T: e.t, N: e.n, M: e.m}
		}
		var idle int64
		if idle, err = r.Algorithm.RefundMicro(&d, &st, &r.Limit, now, r.Cost); err == nil && e != nil && now < e.idle {
			*e = entry{t: st.T, n: st.N, m: st.M, idle: idle}
		}
	}
	sh.mu.Unlock()
	if err != nil {
		return sluice.Decision{}, fmt.Errorf("memstore: refund %q: %w", r.Key, err)
	}
	return d, nil
}
