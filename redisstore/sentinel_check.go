package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// sentinelDialer is the dialer of the client's connections to the
// Sentinels: the connect and handshake bounded by the timeout, as to
// Redis, or with several Sentinels by a share of New's bound (the
// timeout, at least a second) that leaves room for the next Sentinel and
// the master when one hangs (it accepts connections, the kernel
// completing them, and never answers: the client waits out the bound
// before it asks the next, and a wait of New's whole bound failed New);
// and KeepAlive set, which makes rueidis PING an idle connection every
// KeepAlive and close it when the answer takes longer than its write
// timeout (max(timeout, 1s)); the client then asks the next Sentinel for
// the master and listens there. Left zero, as rueidis leaves it for the
// Sentinels, a hung Sentinel's connection (or one cut off silently) stayed
// up for ever: the client heard of no failover on it and stayed on the old
// master, which lives on as a replica answering READONLY. (rueidis's
// TopologyRefreshInterval, a periodic ask, is no cure without it: its
// commands to such a Sentinel wait for ever, holding the lock Close takes.)
func sentinelDialer(o Options) net.Dialer {
	timeout := o.Timeout
	if n := len(o.Addrs); n > 1 {
		timeout = min(timeout, max(o.Timeout, time.Second)/time.Duration(n+1))
	}
	return net.Dialer{Timeout: timeout, KeepAlive: rueidis.DefaultTCPKeepAlive}
}

// sentinelChannels are the channels the client subscribes to on a
// Sentinel to hear of failovers (rueidis's listWatch), in one SUBSCRIBE:
// a Sentinel whose ACL refuses its user one of them refuses it whole,
// once, and the client, connected, never hears of a failover.
var sentinelChannels = []string{"+sentinel", "+slave", "-sdown", "+sdown", "+switch-master", "+reboot"}

// channelsRefused is a Sentinel's ACL refusing its user channels of
// sentinelChannels.
type channelsRefused struct {
	channels []string
	err      error // the first NOPERM
}

func (e *channelsRefused) Error() string {
	return fmt.Sprintf("SUBSCRIBE %s: %v", strings.Join(e.channels, " "), e.err)
}

func (e *channelsRefused) Unwrap() error { return e.err }

// sentinelRefuses returns, as an ErrAuth *refusedError, the first of the
// Sentinels (o.Addrs) that refuses the credentials it gets, or whose ACL
// refuses its user a SENTINEL command the client sends to find the master
// or a channel it subscribes to for failovers (or, as an ErrVersion
// *usernameError, that answers AUTH with a username as a wrong number of
// arguments: a Sentinel older than 6.2), else nil. The Sentinels
// are asked together, for at most the timeout; one that does not answer
// in time, or at all, refuses nothing. New asks when the connection was
// refused credentials or a command, to tell whether the Sentinels or the
// master did (rueidis says only WRONGPASS, or NOPERM and the command),
// and when it connected, since the client, refused its SUBSCRIBE,
// connects all the same.
func sentinelRefuses(o Options) error {
	cr := o.sentinelCredentials()
	who := "the default user"
	if cr.Username != "" {
		who = fmt.Sprintf("user %q", cr.Username)
	}
	timeout := max(o.Timeout, time.Second)
	results := make([]chan error, len(o.Addrs))
	for i, a := range o.Addrs {
		results[i] = make(chan error, 1)
		go func() { results[i] <- sentinelAsk(o, a, cr, timeout) }()
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	late := false
	for i, a := range o.Addrs {
		var err error
		if late {
			select {
			case err = <-results[i]:
			default:
			}
		} else {
			select {
			case err = <-results[i]:
			case <-t.C:
				late = true
			}
		}
		if cr.Username != "" && authArityRefused(err) {
			return &usernameError{op: "connect", addrs: o.Addrs, user: cr.Username, sentinel: a, err: err}
		}
		if !refusedCredentials(err) {
			continue
		}
		what := "the Sentinel at " + a + " refused the credentials of " + who
		if wrongPassForUser(cr, err) {
			// A Sentinel of 6.0 or 6.1 answers any username but
			// "default" so: it has no ACL users of its own.
			switch v := sentinelVersion(o, a, timeout); {
			case v == "":
				what += " (a Sentinel before 6.2 takes no username: check the Sentinel's version, and the credentials)"
			case older(v, usernameMinSentinel):
				return &usernameError{op: "connect", addrs: o.Addrs, user: cr.Username, sentinel: a, version: v, err: err}
			}
		}
		var ch *channelsRefused
		if errors.As(err, &ch) {
			what = "the ACL of the Sentinel at " + a + " does not let " + who + " subscribe to " + strings.Join(ch.channels, ", ") +
				", which the client subscribes to on the Sentinels to hear of failovers (without them, connected, it would never follow one)"
		} else if c := deniedCommand(err); c != "" {
			what = "the ACL of the Sentinel at " + a + " does not let " + who + " run " + c + ", which the client runs to find the master"
		}
		if o.SentinelCredentials == nil {
			what += " (the master's, which the Sentinels get unless they have their own)"
		}
		return &refusedError{op: "connect", addrs: o.Addrs, what: what, kind: ErrAuth, err: err, bySentinel: true}
	}
	return nil
}

// wrongPassForUser reports whether err is WRONGPASS for cr, which names a
// user other than the default one.
func wrongPassForUser(cr Credentials, err error) bool {
	var re *rueidis.RedisError
	return cr.Username != "" && !strings.EqualFold(cr.Username, "default") &&
		errors.As(err, &re) && strings.HasPrefix(re.Error(), "WRONGPASS")
}

// sentinelVersion returns the redis_version the Sentinel at addr tells in
// INFO server, asked without credentials (nothing secret is sent to learn
// why it refused them), or "" when it does not tell: it asks for a
// password first, or does not answer within timeout.
func sentinelVersion(o Options, addr string, timeout time.Duration) string {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, TLSConfig: o.TLS,
		ForceSingleClient: true, DisableCache: true, Dialer: net.Dialer{Timeout: timeout}})
	if err != nil {
		return ""
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	info, err := c.Do(ctx, c.B().Info().Section("server").Build()).ToString()
	if err != nil {
		return ""
	}
	return infoVersion(addr, info).redis
}

// sentinelAsk connects to the Sentinel at addr with cr and runs there
// what the client does to find the master and follow it (sentinelCommands,
// sentinelSubscribe); it returns the first error.
func sentinelAsk(o Options, addr string, cr Credentials, timeout time.Duration) error {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, Username: cr.Username, Password: cr.Password,
		TLSConfig: o.TLS, ForceSingleClient: true, DisableCache: true, Dialer: net.Dialer{Timeout: timeout}})
	if err != nil {
		return err
	}
	defer c.Close()
	if err := sentinelCommands(c, o.Sentinel, timeout); err != nil {
		return err
	}
	return sentinelSubscribe(c, timeout)
}

// sentinelCommands runs on c, a Sentinel, the SENTINEL commands rueidis
// sends to find the master of set (its sentinelClient.listWatch), and
// returns the first error.
func sentinelCommands(c rueidis.Client, set string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, cmd := range []rueidis.Completed{
		c.B().SentinelSentinels().Master(set).Build(),
		c.B().SentinelGetMasterAddrByName().Master(set).Build(),
	} {
		if err := c.Do(ctx, cmd).Error(); err != nil {
			return err
		}
	}
	return nil
}

// sentinelSubscribe subscribes on c, a Sentinel, to each of
// sentinelChannels in turn (Redis's NOPERM does not say which channel it
// refuses), and returns a *channelsRefused of those refused, else the
// first other error, else nil. The subscriptions end with c.
func sentinelSubscribe(c rueidis.Client, timeout time.Duration) error {
	var refused *channelsRefused
	for _, ch := range sentinelChannels {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		var subscribed atomic.Bool // set on rueidis's reading goroutine
		hooked := rueidis.WithOnSubscriptionHook(ctx, func(s rueidis.PubSubSubscription) {
			if s.Kind == "subscribe" && s.Channel == ch {
				subscribed.Store(true)
				cancel()
			}
		})
		err := c.Receive(hooked, c.B().Subscribe().Channel(ch).Build(), func(rueidis.PubSubMessage) {})
		cancel()
		var re *rueidis.RedisError
		switch {
		case subscribed.Load():
		case errors.As(err, &re) && strings.HasPrefix(re.Error(), "NOPERM"):
			if refused == nil {
				refused = &channelsRefused{err: err}
			}
			refused.channels = append(refused.channels, ch)
		case err != nil:
			return err
		}
	}
	if refused != nil {
		return refused
	}
	return nil
}
