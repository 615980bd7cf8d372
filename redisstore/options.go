package redisstore

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// Options configure a Store. The zero value of each field is a sensible
// default except Addrs, which is required.
type Options struct {
	// Addrs are the Redis addresses (host:port): one for a single node, one
	// or more seed nodes with Cluster, the sentinels with Sentinel.
	Addrs []string
	// Cluster selects Redis Cluster: the client discovers the slots from
	// the seed Addrs and routes each key to its node.
	Cluster bool
	// Sentinel, if set, is the name of the master set monitored by the
	// Redis Sentinels at Addrs; the store follows failovers.
	Sentinel string
	// DB is the database number every connection selects (SELECT, as
	// it connects and reconnects; with Sentinel, on each master it
	// follows): the counters, and what features keep on the Client,
	// live there. Default 0. Redis Cluster has database 0 only. Pub/Sub
	// is not per database, so with DB other than 0 the refunds go out on
	// a channel that names it (see RefundChannelOf).
	DB int
	// Username and Password authenticate (AUTH; Username for Redis ACLs).
	Username, Password string
	// SentinelCredentials, with Sentinel, are what the Sentinels get
	// (AUTH) when they require credentials other than the master's: nil
	// (the default) gives them Username and Password; &Credentials{} none,
	// for Sentinels that require none.
	SentinelCredentials *Credentials
	// TLS, if set, connects with TLS.
	TLS *tls.Config
	// TLSFunc, if set with TLS, is asked for the TLS configuration of
	// each connection as it is dialled (New's and every reconnection),
	// instead of TLS: a client certificate or CA bundle rotated since is
	// used by the connections made after, those open keep theirs. It
	// returns nil for TLS.
	TLSFunc func() *tls.Config
	// Timeout bounds every call to Redis, connecting included; default 50ms.
	Timeout time.Duration
	// RedisTime makes decisions use Redis' clock (TIME, inside the script)
	// instead of Request.Now.
	RedisTime bool
	// Prefix starts every Redis key; default "sluice:". No braces.
	Prefix string
	// ExpiryMargin is how long a key is kept after its state is at rest,
	// to cover clock skew between callers; default 10s.
	ExpiryMargin time.Duration
	// MaxFlushDelay lets the client's writer pause up to this long after
	// each write to Redis, so that the calls other goroutines make
	// meanwhile leave in one write: fewer system calls, so less CPU per
	// decision in this process and in Redis under concurrent load, for at
	// most this much added latency. 0 (the default) writes at once.
	MaxFlushDelay time.Duration
	// Needs are the features that run commands of their own with the
	// same user (see Need): New checks that Redis's ACL lets the user run
	// them too, on every master of a Cluster, and fails with ErrAuth
	// naming the command and the feature when it does not. Ping checks
	// them again (or those of the last Require). New always checks the
	// store's own: its scripts' commands and Ping's.
	Needs []Need
	// PublishRefunds makes every give-back of units also publish its
	// key on RefundChannel, for the fleet's over-limit caches (see
	// WatchRefunds): each Refund that left the key counting less (not
	// one of cost 0, nor of units whose window has gone), what a
	// cross-slot TakeAll gives back when a slot refused after the check
	// (the keys it gave units back to), and a lease's units given back (Return, and the expired units
	// Lease gives back first) that left the key counting less. A
	// give-back of one key publishes it in its script, atomically with
	// it; a Return of several keys publishes them after their scripts,
	// many keys to a message (see Return). New then checks that the user
	// may PUBLISH on that channel.
	PublishRefunds bool
	// AlwaysPipeline sends every call of a single-node store through the
	// pipelining client, even a call made while no other is in flight
	// (which otherwise goes through the solo client, see New): the store
	// as it was before, for benchmarks that compare the two.
	AlwaysPipeline bool
}

// Credentials are a Redis user and its password (AUTH); Username ""
// is the default user.
type Credentials struct {
	Username, Password string
}

// Defaults.
const (
	DefaultTimeout      = 50 * time.Millisecond
	DefaultPrefix       = "sluice:"
	DefaultExpiryMargin = 10 * time.Second
)

// withDefaults returns o with zero fields defaulted.
func (o Options) withDefaults() Options {
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.ExpiryMargin == 0 {
		o.ExpiryMargin = DefaultExpiryMargin
	}
	return o
}

// Validate reports whether o can be used.
func (o Options) Validate() error {
	var errs []error
	if len(o.Addrs) == 0 {
		errs = append(errs, errors.New("redisstore: options: addrs: at least one address is required"))
	}
	for _, a := range o.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			errs = append(errs, fmt.Errorf("redisstore: options: addrs: %q: %v", a, err))
		}
	}
	if o.Cluster && o.Sentinel != "" {
		errs = append(errs, errors.New("redisstore: options: cluster and sentinel are exclusive"))
	}
	switch {
	case o.DB < 0:
		errs = append(errs, fmt.Errorf("redisstore: options: db %d must not be negative", o.DB))
	case o.DB != 0 && o.Cluster:
		errs = append(errs, fmt.Errorf("redisstore: options: db %d: Redis Cluster has database 0 only", o.DB))
	}
	if c := o.SentinelCredentials; c != nil {
		if o.Sentinel == "" {
			errs = append(errs, errors.New("redisstore: options: sentinel credentials without sentinel"))
		}
		if c.Username != "" && c.Password == "" {
			errs = append(errs, errors.New("redisstore: options: sentinel credentials: a username needs its password"))
		}
	}
	if o.Timeout < 0 {
		errs = append(errs, fmt.Errorf("redisstore: options: timeout %v must not be negative", o.Timeout))
	}
	if o.ExpiryMargin < 0 {
		errs = append(errs, fmt.Errorf("redisstore: options: expiry margin %v must not be negative", o.ExpiryMargin))
	}
	if o.MaxFlushDelay < 0 || o.MaxFlushDelay > time.Millisecond {
		errs = append(errs, fmt.Errorf("redisstore: options: max flush delay %v must be between 0 and 1ms", o.MaxFlushDelay))
	}
	if err := checkNeeds(o.Needs); err != nil {
		errs = append(errs, fmt.Errorf("redisstore: options: %w", err))
	}
	if strings.ContainsAny(o.Prefix, "{}") {
		errs = append(errs, fmt.Errorf("redisstore: options: prefix %q must not contain braces (they would change the Cluster hash tag)", o.Prefix))
	}
	return errors.Join(errs...)
}
