package sluice

import "errors"

// Sentinel errors; wrapped errors are checkable with errors.Is.
var (
	// ErrStoreUnavailable wraps every error of a store that could not decide
	// (Redis down, timed out). The edge decides what to do: allow, deny, or
	// fall back to a local budget.
	ErrStoreUnavailable = errors.New("sluice: store unavailable")
	// ErrInvalidLimit is wrapped by Limit.Validate and ParseLimit errors.
	ErrInvalidLimit = errors.New("sluice: invalid limit")
	// ErrUnknownAlgorithm is wrapped by ParseAlgorithm errors.
	ErrUnknownAlgorithm = errors.New("sluice: unknown algorithm")
	// ErrInvalidCost is returned for a negative cost.
	ErrInvalidCost = errors.New("sluice: invalid cost")
	// ErrInvalidTime is returned for a decision's time (Request.Now, the
	// now of Algorithm.Take) outside MinTime … MaxTime, such as the zero
	// time.Time of a Request built without Now.
	ErrInvalidTime = errors.New("sluice: time out of range")
	// ErrNeverAllowed is returned by Wait when the request's cost exceeds
	// what the limit can ever admit at once.
	ErrNeverAllowed = errors.New("sluice: cost exceeds the limit's capacity")
)
