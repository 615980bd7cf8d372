package rules

import (
	"fmt"
	"strconv"
	"strings"
)

// AutoCount is a count that may instead be "auto", as lease and shards are
// written. The zero value means "not set".
type AutoCount struct {
	Auto bool // "auto": the count is chosen as the daemon sees fit
	N    int  // the count, when not Auto
}

// IsZero reports whether a is unset.
func (a AutoCount) IsZero() bool { return !a.Auto && a.N == 0 }

// String returns "auto", or N.
func (a AutoCount) String() string {
	if a.Auto {
		return "auto"
	}
	return strconv.Itoa(a.N)
}

// MarshalText implements encoding.TextMarshaler.
func (a AutoCount) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// UnmarshalText reads "auto" or a whole number.
func (a *AutoCount) UnmarshalText(b []byte) error {
	s := string(b)
	if s == "auto" {
		*a = AutoCount{Auto: true}
		return nil
	}
	n, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 10, 32)
	if err != nil {
		return fmt.Errorf("%q: want auto or a whole number", s)
	}
	*a = AutoCount{N: int(n)}
	return nil
}

// DeferSpec is the defer block of a rule whose action is defer: bounds on
// what is queued. A zero field means the default of the deferral queue.
type DeferSpec struct {
	// MaxBodyBytes bounds the body of a request that is queued; a larger
	// one is refused as without defer.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// MaxQueue bounds the requests queued for the rule (over it: refused
	// as without defer).
	MaxQueue int `yaml:"max_queue"`
}

// Bounds of the fleet and defer options.
const (
	// MaxLease bounds a lease chunk.
	MaxLease = 1 << 30
	// MaxDeferBodyBytes bounds defer.max_body_bytes.
	MaxDeferBodyBytes = 64 << 20
	// MaxDeferQueue bounds defer.max_queue.
	MaxDeferQueue = 10_000_000
)
