package redisstore

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
)

// pending holds the connections New's clients dial until New returns.
// rueidis.NewClient takes no context: when New gives up (its context
// ended, or the timeout passed), abandon closes those connections and
// cancels the dials still under way, so the client being built fails at
// once and lets its goroutine go, instead of holding a connection to a
// Redis that does not answer until its own timeout. Once New has its
// clients, settle stops the tracking: their later dials (reconnections)
// are the clients' own.
type pending struct {
	ctx    context.Context // ends at abandon
	cancel context.CancelFunc
	mu     sync.Mutex
	conns  []net.Conn
	done   bool // settled or abandoned (then ctx has ended too)
}

func newPending() *pending {
	p := &pending{}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	return p
}

// dialer wraps dial (a Store's, noting its handshakes in hs) so that its
// connections are New's to close until it has settled.
func (p *pending) dialer(hs *handshakes) func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error) {
	return func(ctx context.Context, addr string, d *net.Dialer, tc *tls.Config) (net.Conn, error) {
		p.mu.Lock()
		abandoned, settled := p.ctx.Err(), p.done
		p.mu.Unlock()
		if abandoned != nil {
			// A dial begun after New gave up (rueidis tries a
			// Sentinel's addresses in turn): it is not the client's.
			return nil, abandoned
		}
		if settled {
			return dialNoting(ctx, addr, d, tc, hs)
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(p.ctx, cancel)
		defer stop()
		c, err := dialNoting(ctx, addr, d, tc, hs)
		if err != nil {
			return nil, err
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.ctx.Err() != nil {
			c.Close()
			return nil, p.ctx.Err()
		}
		if !p.done {
			p.conns = append(p.conns, c)
		}
		return c, nil
	}
}

// settle lets the connections be the clients' alone.
func (p *pending) settle() {
	p.mu.Lock()
	p.done, p.conns = true, nil
	p.mu.Unlock()
}

// abandon closes the connections dialled so far and ends the dials under
// way; later ones fail.
func (p *pending) abandon() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cancel()
	for _, c := range p.conns {
		c.Close()
	}
	p.done, p.conns = true, nil
}
