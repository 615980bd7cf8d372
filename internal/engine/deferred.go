package engine

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/rules"
)

// Queued charges the shadow rules of ms for a request that Admit refused
// (Result.Deferrable) and the edge has since queued under action defer:
// it will be served, at its replay, so a shadow rule, which measures what
// enforcing it would refuse, is charged by it as by an admitted request,
// once. Admit, the request refused, asked the shadow rules without
// charging them and counted their verdicts; the replay asks only the
// defer rule's limit, so this is the one charge. It counts no verdict,
// and a rule over its limit is charged nothing (as Admit found it would
// not pass). A store failure is counted as one.
func (e *Engine) Queued(ctx context.Context, ms []rules.Match, cost int64) {
	var now time.Time
	for i := range ms {
		r := ms[i].Rule
		if r.Action != rules.Shadow {
			continue
		}
		if now.IsZero() {
			now = e.now()
		}
		req, _ := e.request(r, ms[i].Key, cost, now)
		if _, err := e.store.Take(ctx, req); err != nil && !clientGone(ctx) {
			e.storeFailed(err)
		}
	}
}
