package daemon

import (
	"context"
	"slices"
	"time"

	"github.com/sluicehq/sluice/redisstore"
)

// Settling a move (see hotseed.go)
//
// The instance that moves a key reads the counter the key leaves once,
// at its exchange; the other instances switch at their own refresh, up to
// HotKeysRefresh (and an exchange) later, and until then decide on that
// counter. So at its next settleRounds refreshes the moving instance reads
// that counter again and charges the counter the key went to with what it
// gained since it was last read: what the late instances admitted there.
// What it gained after the last round, and what a counter lost meanwhile
// as it refilled (a bucket's tokens, a window's end), is not carried: the
// bound the README gives stays, and a steady late switch costs nothing.
// Nothing is settled for a key that moved again, or that this instance
// no longer holds where the move put it.

// settleRounds is how many refreshes after a move the counter left is
// read again: every instance has switched within two.
const settleRounds = 2

// hotSettle is a move of this instance's, with what the counter the key
// left had used when last read and the rounds to go.
type hotSettle struct {
	hotMove
	used int64
	left int
}

// takeSettles returns the moves to settle, leaving none.
func (d *Daemon) takeSettles() []hotSettle {
	d.settleMu.Lock()
	defer d.settleMu.Unlock()
	xs := d.settles
	d.settles = nil
	return xs
}

func (d *Daemon) addSettle(x hotSettle) {
	d.settleMu.Lock()
	defer d.settleMu.Unlock()
	d.settles = append(d.settles, x)
}

// settle reads again the counters the earlier moves xs left (but those
// that moved again in ms) and charges what they gained to where the keys
// went.
func (d *Daemon) settle(ctx context.Context, gen *generation, s *redisstore.Store, xs []hotSettle, ms []hotMove, now time.Time, n int) {
	for _, x := range xs {
		if slices.ContainsFunc(ms, func(m hotMove) bool { return m.rule == x.rule && m.key == x.key }) {
			continue
		}
		// hotRequest first: Set.Rule makes a summary for a rule gone.
		req, ok := hotRequest(gen, x.rule, x.key)
		if !ok || d.hot.Rule(x.rule).IsHot(x.key) != x.hot {
			continue
		}
		req.Now = now
		var used int64
		var err error
		if x.hot {
			used, err = keyUsed(ctx, s, req)
		} else {
			used, err = shardsSum(ctx, s, req, n)
		}
		if err == nil && used > x.used {
			if x.hot {
				err = chargeShards(ctx, gen.eng.Store(), s, req, used-x.used, n)
			} else {
				err = chargeKey(ctx, gen.eng.Store(), req, used-x.used)
			}
		}
		if err != nil {
			d.log.Debug("hot keys: settling a key's move", "rule", x.rule, "key", x.key, "to shards", x.hot, "err", err)
			continue
		}
		x.used = max(x.used, used)
		if x.left--; x.left > 0 {
			d.addSettle(x)
		}
	}
}
