package sluice

import (
	"context"
	"time"
)

// Request is one question to a Store: may Key spend Cost under Limit, by
// Algorithm, at Now?
type Request struct {
	Key       string
	Algorithm Algorithm
	Limit     Limit
	Cost      int64
	Now       time.Time
}

// Store keeps per-key state and runs the algorithms on it atomically.
// Implementations: memstore (in process) and redisstore (shared by a fleet).
// A Store is safe for concurrent use.
type Store interface {
	// Take decides one request and, if it is allowed, counts it.
	// The error, if any, means the store could not decide; store failures
	// wrap ErrStoreUnavailable.
	Take(ctx context.Context, r Request) (Decision, error)

	// TakeAll decides several requests as one: they are all counted if
	// every one is allowed, and none is counted otherwise, so a request
	// denied by one rule consumes nothing from the others. ds[i] receives
	// what rs[i] alone decides; len(ds) must be len(rs).
	TakeAll(ctx context.Context, rs []Request, ds []Decision) error
}

// AllAllowed reports whether every decision in ds allowed its request.
func AllAllowed(ds []Decision) bool {
	for i := range ds {
		if !ds[i].Allowed {
			return false
		}
	}
	return true
}
