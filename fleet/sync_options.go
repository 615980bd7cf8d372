package fleet

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
)

// What NewSync accepts: SyncOptions and their validation.

// SyncOptions configure a Sync.
type SyncOptions struct {
	// Interval is how often the instance sends its hits and reads back the
	// global counts: one batch, one round trip, for every key it decided
	// since the last batch. Required.
	Interval time.Duration
	// Applies selects the requests Sync decides; the others go to the
	// shared store unchanged. Nil selects every request whose algorithm
	// can be shared (redisstore.Shareable). It is called on every request
	// of such an algorithm, with a copy of it: a pointer would make every
	// request escape to the heap, as the compiler cannot see where a func
	// value keeps it.
	Applies func(sluice.Request) bool
	// OnBatch, if set, is called after every batch with its number of
	// keys, how long the round trip took, and its error.
	OnBatch func(keys int, took time.Duration, err error)
	// MaxKeys bounds the keys Sync holds (a view and the hits not yet
	// sent: about 480 bytes each, measured with 30-byte keys, the keys'
	// strings aside); 0 means DefaultSyncMaxKeys. While
	// it holds that many, a key it does not hold is decided in the shared
	// store, exactly (one round trip, as without Sync), and counted in
	// SyncStats.Overflow, until idle keys age out (two intervals unused).
	// Decisions under way at once may pass it by their number.
	MaxKeys int
}

// Validate reports whether o can be used.
func (o SyncOptions) Validate() error {
	if o.Interval <= 0 {
		return fmt.Errorf("fleet: sync: interval %v must be positive", o.Interval)
	}
	return checkMaxKeys("sync", o.MaxKeys)
}
