package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
)

// giveBackDescriptors gives back the hits of the descriptors ds[idx...]
// (Descriptor.Negative, Envoy's is_negative_hits), each to its rule's
// counter, at now (sluice.Refunder): never more than the counter holds.
// Each is answered OK, its Decision the counter after the refund, as the
// reference service answers them (they bypass the over-limit check). A
// refund the store cannot make is counted and logged as a store failure
// and leaves the descriptor OK without figures; it changes nothing of the
// request's answer (a refund denies nothing).
func (e *Engine) giveBackDescriptors(ctx context.Context, ds []Descriptor, st []DescriptorStatus, idx []int, now time.Time) {
	for _, i := range idx {
		d, err := e.giveBackDescriptor(ctx, &ds[i], now)
		if err != nil {
			if !clientGone(ctx) {
				e.storeFailed(fmt.Errorf("engine: give back the hits of %q: %w", ds[i].Key, err))
			}
			continue
		}
		st[i] = DescriptorStatus{Decision: d, Asked: true}
	}
}

// giveBackDescriptor gives d's hits back to its counter. A sharded rule's
// hits go back over its shards as a report's are charged (Options.Spread,
// each its share), or to one shard.
func (e *Engine) giveBackDescriptor(ctx context.Context, d *Descriptor, now time.Time) (sluice.Decision, error) {
	rf, ok := e.store.(sluice.Refunder)
	if !ok {
		return sluice.Decision{}, fmt.Errorf("the store (%T): %w", e.store, errors.ErrUnsupported)
	}
	r := d.Rule
	req := sluice.Request{Key: d.Key, Algorithm: r.Algorithm, Limit: r.Limit, Cost: d.Cost, Now: now}
	n := 1
	if e.shard != nil {
		switch {
		case r.Shards.N >= 2:
			n = r.Shards.N
		case r.Shards.Auto && e.auto != nil && e.hotKeys != nil && e.hotKeys.Rule(r.FullName()).IsHot(strings.TrimPrefix(req.Key, r.Head())):
			n = e.auto()
		}
	}
	if n < 2 {
		return rf.Refund(ctx, req)
	}
	var parts []sluice.Request
	if e.spreadf != nil && req.Cost >= 2 {
		parts = e.spreadf(req, n)
	}
	if len(parts) < 2 {
		n = e.shard(&req, n)
		out, err := rf.Refund(ctx, req)
		if err == nil && n > 1 {
			unshard(&out, r.Limit, n)
		}
		return out, err
	}
	var out sluice.Decision
	for j, p := range parts {
		x, err := rf.Refund(ctx, p)
		if err != nil {
			return sluice.Decision{}, err
		}
		if j == 0 {
			out = x
		} else {
			fold(&out, x)
		}
	}
	unshard(&out, r.Limit, n)
	return out, nil
}
