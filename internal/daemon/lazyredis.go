package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// lazyRedis is a redisstore.Store that may not be connected yet: until it
// is, every call fails with sluice.ErrStoreUnavailable, and a goroutine
// tries to connect every ConnectRetry.
type lazyRedis struct {
	s      atomic.Pointer[redisstore.Store]
	ids    atomic.Pointer[string] // the servers' run_ids when it connected (watchRunIDs)
	tooOld atomic.Bool            // the last checkVersions failed (watchRunIDs)
	cancel context.CancelFunc
	ctx    context.Context // done at Close
	up     chan struct{}   // closed once s is set
	wg     sync.WaitGroup

	// mu orders a reload's check and setNeeds (see hold) with connect's
	// keeping s: a connection is kept only once it has checked the needs
	// in force then.
	mu    sync.Mutex
	needs *[]redisstore.Need // the ACL check's, for the next connect (see setNeeds)
	// inForce is needs, read without mu: by the version check of each
	// tick (checkVersions), which a reload's check must not hold up.
	inForce atomic.Pointer[[]redisstore.Need]
}

var errNotConnected = fmt.Errorf("daemon: not connected to Redis yet: %w", sluice.ErrStoreUnavailable)

// newLazyRedis connects with o, waiting at most o's timeout (at least a
// second); if that fails it returns a store that keeps trying. Redis
// refusing the credentials, TLS or the database, or too old for the
// config (redisstore.ErrAuth, ErrTLS, ErrDB, ErrVersion), is no outage
// but a mistake in the config, which waiting does not mend: newLazyRedis
// returns it, and the daemon does not start. start bounds
// the first attempt only: once it is done, newLazyRedis gives up at once
// and returns start.Err(); the store it returns
// otherwise keeps trying whatever becomes of start.
func newLazyRedis(start context.Context, o redisstore.Options, log *slog.Logger) (*lazyRedis, error) {
	l := &lazyRedis{needs: &o.Needs, up: make(chan struct{})}
	l.inForce.Store(&o.Needs)
	ctx, cancel := context.WithCancel(context.Background())
	l.ctx, l.cancel = ctx, cancel
	err := l.connect(start, o)
	if err := start.Err(); err != nil {
		// Connected or not, the startup has stopped.
		l.Close()
		return nil, err
	}
	if err == nil {
		return l, nil
	}
	if refusal(err) {
		cancel()
		return nil, err
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		t := time.NewTicker(ConnectRetry)
		defer t.Stop()
		told := false // the last failure logged was a refusal
		for n := 1; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			err := l.connect(ctx, o)
			if err == nil {
				log.Info("connected to Redis", "addrs", o.Addrs, "attempts", n+1)
				return
			}
			// Logged at the first attempt, every 60th, and when the
			// failure changes from one kind to the other.
			refused := refusal(err)
			if n != 1 && n%60 != 0 && refused == told {
				continue
			}
			told = refused
			if refused {
				// Redis came up refusing the config's credentials or TLS
				// (changed meanwhile), or a feature's commands (a reload
				// added it, see connect): no outage.
				log.Error("Redis refused the connection; retrying: "+refusalHint(err), "addrs", o.Addrs, "every", ConnectRetry, "err", err)
			} else {
				log.Warn("Redis does not answer; retrying", "addrs", o.Addrs, "every", ConnectRetry, "err", err)
			}
		}
	}()
	return l, nil
}

// refusal reports whether err (of redisstore.New) is Redis refusing
// the config (redisstore.ErrAuth, ErrTLS, ErrDB), or too old for it
// (ErrVersion), rather than an outage.
func refusal(err error) bool {
	return errors.Is(err, redisstore.ErrAuth) || errors.Is(err, redisstore.ErrTLS) || errors.Is(err, redisstore.ErrDB) ||
		errors.Is(err, redisstore.ErrVersion)
}

func (l *lazyRedis) connect(ctx context.Context, o redisstore.Options) error {
	ctx, cancel := context.WithTimeout(ctx, max(o.Timeout, time.Second))
	defer cancel()
	l.mu.Lock()
	needs := l.needs
	l.mu.Unlock()
	o.Needs = *needs
	s, err := redisstore.New(ctx, o)
	if err != nil {
		return err
	}
	if ids, err := s.RunIDs(ctx); err == nil {
		l.ids.Store(&ids)
	}
	for {
		// A reload while New ran found no store, and left its needs to
		// this connection (setNeeds): checked here, or its feature would
		// run unchecked, failing NOPERM at every turn.
		l.mu.Lock()
		if l.needs == needs {
			l.s.Store(s)
			close(l.up)
			l.mu.Unlock()
			return nil
		}
		needs = l.needs
		l.mu.Unlock()
		if err := s.Require(ctx, *needs); err != nil {
			s.Close()
			return err
		}
	}
}

// hold keeps connect from keeping a connection it made until release is
// called: a reload holds it from its check to its setNeeds, so that a
// connection made meanwhile is kept only once it has checked the needs
// the reload left in force (a refused reload's: those before it).
func (l *lazyRedis) hold() (release func()) {
	l.mu.Lock()
	return l.mu.Unlock
}

// check asks Redis, when connected, whether the user's ACL lets it run
// needs (see redisNeeds; redisstore.Store.Require): one it lacks is an
// ErrAuth error. Not connected, there is no one to ask: needs are checked
// when the store connects, if they are made the store's by setNeeds.
// The caller holds l (hold).
func (l *lazyRedis) check(ctx context.Context, needs []redisstore.Need) error {
	if s := l.s.Load(); s != nil {
		if err := s.Require(ctx, needs); err != nil && (errors.Is(err, redisstore.ErrAuth) || errors.Is(err, redisstore.ErrVersion)) {
			return err
		}
	}
	return nil
}

// checkVersions checks the versions of the servers the last RunIDs met
// against the needs in force (redisstore.Store.CheckVersions); nil until
// connected.
func (l *lazyRedis) checkVersions() error {
	s := l.s.Load()
	if s == nil {
		return nil
	}
	return s.CheckVersions(*l.inForce.Load())
}

// setNeeds makes needs those the store's ACL check asks for when it
// connects, even a connection already being made (see connect): the
// needs of the config in force, set once a reload applies (a refused
// one's would refuse a connection that the config in force does not
// need refused, or let one through that it does). The caller holds l
// (hold) since its check.
func (l *lazyRedis) setNeeds(needs []redisstore.Need) { l.needs = &needs; l.inForce.Store(&needs) }

// watchRefunds tells lst of the refunds published to the fleet
// (redisstore.Store.WatchRefunds) from when the store connects until
// Close; lst is paused until then.
func (l *lazyRedis) watchRefunds(lst redisstore.RefundListener) {
	lst.Pause()
	l.wg.Go(func() {
		select {
		case <-l.ctx.Done():
			return
		case <-l.up:
		}
		_ = l.s.Load().WatchRefunds(l.ctx, lst)
	})
}

// Connected reports whether the store has connected.
func (l *lazyRedis) Connected() bool { return l.s.Load() != nil }

func (l *lazyRedis) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	s := l.s.Load()
	if s == nil {
		return sluice.Decision{}, errNotConnected
	}
	return s.Take(ctx, r)
}

func (l *lazyRedis) TakeAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	s := l.s.Load()
	if s == nil {
		return errNotConnected
	}
	return s.TakeAll(ctx, rs, ds)
}

// Refund gives units back (sluice.Refunder), once connected.
func (l *lazyRedis) Refund(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	s := l.s.Load()
	if s == nil {
		return sluice.Decision{}, errNotConnected
	}
	return s.Refund(ctx, r)
}

func (l *lazyRedis) Reset(ctx context.Context, r sluice.Request) error {
	s := l.s.Load()
	if s == nil {
		return errNotConnected
	}
	return s.Reset(ctx, r)
}

// Ping reports whether Redis answers (for /readyz and the fallback's
// probe); it fails until the store has connected.
func (l *lazyRedis) Ping(ctx context.Context) error {
	s := l.s.Load()
	if s == nil {
		return errNotConnected
	}
	return s.Ping(ctx)
}

// RunIDs identifies the Redis servers (redisstore.Store.RunIDs); it fails
// until the store has connected.
func (l *lazyRedis) RunIDs(ctx context.Context) (string, error) {
	s := l.s.Load()
	if s == nil {
		return "", errNotConnected
	}
	return s.RunIDs(ctx)
}

// Close stops connecting and closes the connections.
func (l *lazyRedis) Close() {
	l.cancel()
	l.wg.Wait()
	if s := l.s.Load(); s != nil {
		s.Close()
	}
}
