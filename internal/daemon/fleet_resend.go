package daemon

import (
	"time"

	"github.com/sluicehq/sluice/fleet"
)

// resendEvery is how often a Sync a reload closed while Redis did not
// answer tries again to send its hits.
const resendEvery = time.Second

// resendLater sends the hits s has not sent, s being a Sync that a reload
// closed (its interval no longer used) and whose last batch failed, Redis
// not answering: every resendEvery until a batch succeeds, and once more
// at Close. Dropped, they would never be counted, and the fleet could
// admit that many again; an interval still in use sends them with its
// next batches in the same way. Its counters stay in its interval's
// series until then (closingSyncs).
func (f *fleetStore) resendLater(s *fleet.Sync, iv time.Duration) {
	f.resending.Add(1)
	go func() {
		defer f.resending.Done()
		t := time.NewTicker(resendEvery)
		defer t.Stop()
		for stop := false; !stop; {
			select {
			case <-f.stop:
				stop = true // one last try
			case <-t.C:
			}
			// After Close, one Flush that succeeds has sent everything,
			// hits that waited for the ops in doubt it resent included.
			if s.Flush() == nil {
				break
			}
		}
		f.mu.Lock()
		f.syncDone(s, iv)
		f.mu.Unlock()
	}()
}

// syncDone sums the counters of s, closed, into its interval's. f.mu is
// held.
func (f *fleetStore) syncDone(s *fleet.Sync, iv time.Duration) {
	f.doneSyncs[iv] = addSyncStats(f.doneSyncs[iv], s.Stats())
	delete(f.closingSyncs, s)
}
