package fleet

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
)

// What NewLease accepts: LeaseOptions and their validation, and the share
// of what is left that an auto chunk (Chunk 0) reserves.

// LeaseOptions configure a Lease.
type LeaseOptions struct {
	// Chunk is how many units the instance reserves at a time; it gets
	// fewer when fewer are left. 0 is auto: a sixteenth of what the
	// instance last saw left (at least one), so the chunks shrink as the
	// limit nears and the last units go one by one.
	Chunk int64
	// Applies selects the requests Lease decides; the others go to the
	// shared store unchanged. Nil selects every request whose algorithm
	// can be shared (redisstore.Shareable). It is called on every request
	// of such an algorithm, with a copy of it (see SyncOptions.Applies).
	Applies func(sluice.Request) bool
	// OnLease, if set, is called after every reservation with the units
	// asked and granted, how long the round trip took, and its error.
	OnLease func(asked, granted int64, took time.Duration, err error)
	// MaxKeys bounds the keys Lease holds (a lease and the store's state
	// at its grant: about 410 bytes each, measured with 30-byte keys, the
	// keys' strings aside); 0 means
	// DefaultLeaseMaxKeys. While it holds that many, and none can be let
	// go (idle a period, with no unit reserved and no refusal pending), a
	// key it does not hold is decided in the shared store, exactly (one
	// round trip, as without Lease: still never over the limit), and
	// counted in LeaseStats.Overflow.
	MaxKeys int
}

// Validate reports whether o can be used.
func (o LeaseOptions) Validate() error {
	if o.Chunk < 0 {
		return fmt.Errorf("fleet: lease: chunk %d must not be negative (0 is auto)", o.Chunk)
	}
	return checkMaxKeys("lease", o.MaxKeys)
}

// autoShare is the part of what is left that an auto lease reserves.
const autoShare = 16
