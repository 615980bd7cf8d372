package redisstore

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// Refunds seen by the fleet
//
// An over-limit cache (fleet.OverLimitCache) relies on a key it saw
// refused staying refused until the RetryAfter it remembered; a refund
// (Refund) breaks that, and so do the other give-backs: a cross-slot
// TakeAll's of what it counted when a later slot refused, and a lease's
// units handed back (Return, Lease's expired units); the cache of an
// instance other than the one that gave back cannot see them. With
// Options.PublishRefunds, the give-back's script PUBLISHes the key on
// RefundChannel atomically with it (on a Cluster, PUBLISH reaches the
// subscribers of every node), or, for a Return of many keys, Return
// publishes them once their scripts answered, many to a message; and
// WatchRefunds, on each instance, subscribes to it on a connection of
// its own and tells the cache to forget each key.

// RefundListener is told what WatchRefunds sees; fleet.OverLimitCache is
// one.
type RefundListener interface {
	// ForgetKey is called for each refund published, with its key's
	// namespace and name.
	ForgetKey(ns, key string)
	// Pause is called whenever the subscription is not (yet, or any
	// longer) confirmed: refunds may go unseen until Resume.
	Pause()
	// Resume is called each time the subscription is confirmed: from
	// then on every refund published is seen.
	Resume()
}

// refundWatchRetry bounds the wait between two subscriptions after one
// failed or was cut; it starts at a hundredth of it and doubles.
const refundWatchRetry = time.Second

// RefundChannel is the channel on which refunds are published
// (Options.PublishRefunds): RefundChannelOf the key prefix and database.
func (s *Store) RefundChannel() string { return RefundChannelOf(s.opts.Prefix, s.opts.DB) }

// RefundChannelOf is the RefundChannel of a store whose keys start with
// prefix (Options.Prefix) in database db (Options.DB): prefix then
// "refunds", for an ACL's &pattern, then ":db" and the number when db is
// not 0. Pub/Sub is not per database: two stores on one Redis that differ
// by their database alone would otherwise hear each other's refunds.
func RefundChannelOf(prefix string, db int) string {
	if db != 0 {
		return prefix + "refunds:db" + strconv.Itoa(db)
	}
	return prefix + "refunds"
}

// A message on RefundChannel names the keys given back, in one of two
// forms. One key, as a give-back of one key publishes in its script
// (refundMessage): the namespace's length in decimal, ":", the namespace,
// the key; its size is the key's. Several keys, as Return publishes the
// keys of many give-backs after their scripts (refundBatches): ":", then
// for each key the namespace's length, ":", the namespace, the key's
// length, ":", the key. The second form starts with ":", which a
// subscriber that reads only the first refuses as no refund's: it forgets
// everything it remembered (see WatchRefunds), never too little.

// refundMessage is what a give-back of ns+key alone publishes.
func refundMessage(ns, key string) string {
	return strconv.Itoa(len(ns)) + ":" + ns + key
}

// maxRefundBatch bounds the size of a message naming several keys: a
// longer list goes out in several. A key longer than it goes alone.
const maxRefundBatch = 64 << 10

// nsName is a key given back: its namespace and name.
type nsName struct{ ns, name string }

// refundBatches returns the messages that name keys, as few as fit
// maxRefundBatch each (a single key in refundMessage's form).
func refundBatches(keys []nsName) []string {
	if len(keys) == 1 {
		return []string{refundMessage(keys[0].ns, keys[0].name)}
	}
	var out []string
	var b []byte
	for _, k := range keys {
		n := len(strconv.Itoa(len(k.ns))) + 1 + len(k.ns) + len(strconv.Itoa(len(k.name))) + 1 + len(k.name)
		if len(b) > 1 && len(b)+n > maxRefundBatch {
			out = append(out, string(b))
			b = b[:0]
		}
		if len(b) == 0 {
			b = append(b, ':')
		}
		b = strconv.AppendInt(b, int64(len(k.ns)), 10)
		b = append(b, ':')
		b = append(b, k.ns...)
		b = strconv.AppendInt(b, int64(len(k.name)), 10)
		b = append(b, ':')
		b = append(b, k.name...)
	}
	if len(b) > 1 {
		out = append(out, string(b))
	}
	return out
}

// lengthPrefixed reads a decimal length (in its canonical form), ":" and
// that many bytes, v, at the start of m; rest is what follows them.
func lengthPrefixed(m string) (v, rest string, ok bool) {
	i := strings.IndexByte(m, ':')
	if i < 1 {
		return "", "", false
	}
	n, err := strconv.Atoi(m[:i])
	if err != nil || n < 0 || n > len(m)-i-1 || m[:i] != strconv.Itoa(n) {
		return "", "", false
	}
	return m[i+1 : i+1+n], m[i+1+n:], true
}

// parseRefundMessage reads a message on RefundChannel: the keys it names,
// in order, or ok false if it is no refund's (nothing half read).
func parseRefundMessage(m string) (keys []nsName, ok bool) {
	if rest, many := strings.CutPrefix(m, ":"); many {
		for rest != "" {
			var k nsName
			if k.ns, rest, ok = lengthPrefixed(rest); !ok {
				return nil, false
			}
			if k.name, rest, ok = lengthPrefixed(rest); !ok {
				return nil, false
			}
			keys = append(keys, k)
		}
		return keys, len(keys) > 0
	}
	ns, key, ok := lengthPrefixed(m)
	if !ok {
		return nil, false
	}
	return []nsName{{ns, key}}, true
}

// WatchRefunds subscribes to RefundChannel on a connection of its own and
// tells l of every refund published there (see RefundListener), until ctx
// is done; it returns ctx's error. It calls l.Pause first and when it
// returns, and whenever the subscription is lost (the connection cut,
// Redis down): then it subscribes again, waiting up to a second between
// attempts, and calls l.Resume once Redis confirms. A message naming
// several keys calls l.ForgetKey for each. A message on the channel that
// is not a refund's (someone else publishing) makes l pause and resume:
// its keys are unknown.
//
// A refund published while the connection is cut but before the client
// sees it closed is not seen: the listener is told only once it is
// (rueidis notices a silent cut by its keepalive).
func (s *Store) WatchRefunds(ctx context.Context, l RefundListener) error {
	l.Pause()
	defer l.Pause()
	ch := s.RefundChannel()
	wait := refundWatchRetry / 100
	for {
		var confirmed atomic.Bool
		hctx := rueidis.WithOnSubscriptionHook(ctx, func(p rueidis.PubSubSubscription) {
			if p.Channel != ch {
				return
			}
			switch p.Kind {
			case "subscribe":
				confirmed.Store(true)
				l.Resume()
			case "unsubscribe":
				l.Pause()
			}
		})
		hctx = rueidis.WithOnReceiveReturnHook(hctx, func(err error, _ rueidis.CommandClient) error {
			l.Pause()
			return err
		})
		dc, release := s.c.Dedicate()
		_ = dc.Receive(hctx, dc.B().Subscribe().Channel(ch).Build(), func(m rueidis.PubSubMessage) {
			if keys, ok := parseRefundMessage(m.Message); ok {
				for _, k := range keys {
					l.ForgetKey(k.ns, k.name)
				}
			} else {
				l.Pause()
				l.Resume()
			}
		})
		l.Pause()
		release()
		if confirmed.Load() {
			wait = refundWatchRetry / 100
		} else {
			wait = min(2*wait, refundWatchRetry)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
