package sluice

import "fmt"

// Algorithm selects how a Limit is enforced. The zero value is not a valid
// algorithm; use one of the constants.
type Algorithm uint8

// The six algorithms; their names (String) are those the
// daemon's config and `sluice simulate -algorithm` take.
const (
	// TokenBucket admits while tokens ≥ cost; the bucket holds Burst tokens,
	// starts full, and refills continuously at Rate per Period.
	TokenBucket Algorithm = iota + 1
	// LeakyBucket is a shaper: every admitted request gets a Delay so that
	// requests leave evenly spaced Period/Rate apart; up to Burst requests
	// may wait behind the one leaving now.
	LeakyBucket
	// FixedWindow counts requests in windows aligned to multiples of Period
	// since the Unix epoch. Cheap, but admits up to 2× Rate across a boundary.
	FixedWindow
	// SlidingWindowLog keeps the time of every admitted request in the last
	// Period: exact, memory grows with Rate.
	SlidingWindowLog
	// SlidingWindowCounter estimates the sliding window from the counts of
	// Segments+1 sub-windows (Segments 1 is the classic two-window estimate).
	SlidingWindowCounter
	// GCRA decides from one timestamp per key (the theoretical arrival
	// time; it also keeps when a request last added debt, for refunds) and
	// decides exactly as TokenBucket for requests in time order. A request older than the key's last one
	// (clocks a little apart) is counted at its own time, with the debt the
	// bucket had then, where TokenBucket counts it against the tokens as
	// they are: GCRA may refuse it where TokenBucket admits it.
	GCRA
)

var algorithmNames = [...]string{
	TokenBucket:          "token_bucket",
	LeakyBucket:          "leaky_bucket",
	FixedWindow:          "fixed_window",
	SlidingWindowLog:     "sliding_window_log",
	SlidingWindowCounter: "sliding_window_counter",
	GCRA:                 "gcra",
}

// Algorithms lists every algorithm, in the order of the constants.
func Algorithms() []Algorithm {
	return []Algorithm{TokenBucket, LeakyBucket, FixedWindow, SlidingWindowLog, SlidingWindowCounter, GCRA}
}

// String returns the config name of a, such as "token_bucket".
func (a Algorithm) String() string {
	if a.Valid() {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// Valid reports whether a is one of the six algorithms.
func (a Algorithm) Valid() bool { return a >= TokenBucket && a <= GCRA }

// ParseAlgorithm returns the algorithm named s ("token_bucket", "gcra", …).
func ParseAlgorithm(s string) (Algorithm, error) {
	for _, a := range Algorithms() {
		if algorithmNames[a] == s {
			return a, nil
		}
	}
	return 0, fmt.Errorf("%w: %q (want one of token_bucket, leaky_bucket, fixed_window, sliding_window_log, sliding_window_counter, gcra)", ErrUnknownAlgorithm, s)
}

// MarshalText implements encoding.TextMarshaler.
func (a Algorithm) MarshalText() ([]byte, error) {
	if !a.Valid() {
		return nil, fmt.Errorf("%w: %d", ErrUnknownAlgorithm, uint8(a))
	}
	return []byte(a.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (a *Algorithm) UnmarshalText(b []byte) error {
	v, err := ParseAlgorithm(string(b))
	if err != nil {
		return err
	}
	*a = v
	return nil
}
