package memstore

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
)

var _ sluice.WithinTaker = (*Store)(nil)

// TakeWithin is Take, except that a leaky bucket request Take would admit
// with a Delay over within is not counted (sluice.WithinTaker): the check
// and the take are one step under the shard's lock, so no request can
// come between them.
func (s *Store) TakeWithin(ctx context.Context, r sluice.Request, within time.Duration) (sluice.Decision, bool, error) {
	if r.Algorithm != sluice.LeakyBucket || r.Force || r.Cost == 0 {
		d, err := s.Take(ctx, r)
		return d, false, err
	}
	now := r.Now.UnixMicro()
	h, ns := s.hash(r.Namespace, r.Key)
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.small.get(h, ns, r.Key)
	var st sluice.State
	if e != nil && now < e.idle {
		st = sluice.State{T: e.t, N: e.n, M: e.m}
	}
	before := st
	var d sluice.Decision
	idle, err := step(&r, r.Cost, &d, &st, now)
	if err != nil {
		return sluice.Decision{}, false, fmt.Errorf("memstore: take %q: %w", r.Key, err)
	}
	if d.Allowed && d.Delay > within {
		// Late: decided again at cost 0, on the state as it was, for
		// what the key has left without it.
		delay := d.Delay
		if _, err := step(&r, 0, &d, &before, now); err != nil {
			return sluice.Decision{}, false, fmt.Errorf("memstore: take %q: %w", r.Key, err)
		}
		d.Allowed, d.RetryAfter, d.Delay = false, delay, 0
		return d, true, nil
	}
	if e != nil {
		*e = entry{t: st.T, n: st.N, m: st.M, idle: idle}
	} else {
		s.putSmall(sh, h, ns, r.Key, e, &st, idle, now)
	}
	return d, false, nil
}
