package fleet

import (
	"errors"
	"fmt"
)

// The bound on the keys a Sync or a Lease holds, shared by both: past
// MaxKeys keys, a new key is decided in the shared store, exactly (one
// round trip, as without the decorator), and counted as an overflow,
// until keys held are let go (a Sync's after two idle intervals, a
// Lease's once idle a period with nothing reserved).

// DefaultMaxKeys is the default of SyncOptions.MaxKeys and
// LeaseOptions.MaxKeys: about 48 MB of sync views, or 41 MB of leases
// (measured with 30-byte keys, the keys' own strings not counted:
// BenchmarkMemory100K).
const DefaultMaxKeys = 100_000

// DefaultSyncMaxKeys is SyncOptions.MaxKeys's default.
const DefaultSyncMaxKeys = DefaultMaxKeys

// DefaultLeaseMaxKeys is LeaseOptions.MaxKeys's default.
const DefaultLeaseMaxKeys = DefaultMaxKeys

// errFull is the answer for a new key while MaxKeys keys are held: the
// caller decides it in the shared store and counts an overflow.
var errFull = errors.New("fleet: full")

// checkMaxKeys validates a MaxKeys option; name ("sync", "lease")
// prefixes the error.
func checkMaxKeys(name string, n int) error {
	if n < 0 {
		return fmt.Errorf("fleet: %s: max keys %d must not be negative", name, n)
	}
	return nil
}

// maxKeysOr is n, or DefaultMaxKeys for 0.
func maxKeysOr(n int) int {
	if n == 0 {
		return DefaultMaxKeys
	}
	return n
}

// full reports whether a new key is refused with held keys of at most max.
func full(held, max int) bool { return held >= max }
