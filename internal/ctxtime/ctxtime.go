// Package ctxtime waits on the clock and on a context at once.
package ctxtime

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx ends, returning ctx's error then and nil
// when d has elapsed. A d of zero or less returns at once (nil, unless ctx
// has already ended).
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
