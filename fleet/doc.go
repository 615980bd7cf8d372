// Package fleet holds sluice.Store decorators for fleets of instances that
// share one store (redisstore): each wraps a Store and is one, so they stack
// and work the same under a library user's Limiter and under the daemon.
//
//   - Sync (a soft limit) decides locally from its last view of the shared
//     count and reconciles with the store once per interval, in one batch;
//     the fleet may pass a limit by a bound its documentation states.
//   - Lease (a hard limit) reserves quota from the store in chunks and
//     spends it locally; the fleet never passes the limit.
//   - OverLimitCache answers requests a key is known to refuse without a
//     store call, exactly (it never refuses what the store would admit).
//   - Fallback decides in memory, at a share of each limit, while the store
//     is unreachable, and returns to the store when it answers again.
//
// Reports (sluice.Request.Force: a cost charged even past the limit, as
// debt) pass through every decorator. Sync charges them on its view and
// sends them with its next batch, like any hit (the other instances see the
// debt after their next sync). Lease spends its units on a report that
// they cover; otherwise it gives the key's units back and the shared store
// charges the report (in TakeAll it gives them back first in any case; the
// other instances spend the units they already hold before the store
// refuses them). The OverLimitCache never answers a report from memory and stays
// exact (a charge only makes a key refuse for longer), and the Fallback
// charges reports in memory, at its share of the limit, while the store is
// unreachable.
//
// Sync and Lease decide locally at each Request's Now, so the requests they
// handle need it within sluice.MinTime … sluice.MaxTime (others are refused
// with sluice.ErrInvalidTime) even over a redisstore with RedisTime, which
// does not read it. Over such a store they move it onto Redis' clock by
// the distance each call to the store shows (a grant for Lease, a key's
// decision or read for Sync), so that an instance whose clock is ahead or
// behind decides as Redis would.
//
// Order matters when stacking: put the OverLimitCache next to the shared
// store and the Fallback outside it, so that the cache only ever learns from
// the shared store's refusals. Sync and Lease need the shared store itself
// (its Sync, Lease and Return); requests they do not handle go to the store
// they wrap.
//
// Units given back by another instance (a refund, a Lease's Close, a
// cross-slot TakeAll's refund) reach an OverLimitCache and a Lease only
// if they are told: pass NewRefundFeed(cache, leases...), one listener
// for the whole stack, to redisstore.Store.WatchRefunds (the store opened
// with PublishRefunds). Sync and Fallback need no telling.
package fleet
