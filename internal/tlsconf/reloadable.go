package tlsconf

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Reloadable is a listener's TLS whose files can be read again (the
// daemon's reload, SIGHUP), so that a renewed certificate, key or client CA
// takes effect without a restart. Every handshake uses the configuration
// loaded last (through tls.Config.GetConfigForClient).
//
// A certificate read before its NotBefore (issued ahead of time, or by a
// CA whose clock runs ahead) is not served while the one in force is still
// valid, since clients would refuse it: it is held, and the first
// handshake from its NotBefore on puts it in force. One read after its
// NotAfter is not served while the one in force is valid either. The
// client CA read with it is in force at once.
type Reloadable struct {
	o       Options
	next    []string // ALPN protocols offered
	cur     atomic.Pointer[tls.Config]
	held    atomic.Pointer[tls.Config] // in force from its leaf's NotBefore
	mu      sync.Mutex                 // over writes of cur and held
	inForce func(*x509.Certificate)
}

// NewReloadable loads o for a listener offering the ALPN protocols next
// ("h2" for gRPC; "h2", "http/1.1" for HTTPS). Its certificate is served
// even if it is not valid yet: there is no other.
func NewReloadable(o Options, next ...string) (*Reloadable, error) {
	r := &Reloadable{o: o, next: next}
	cfg, err := r.Load()
	if err != nil {
		return nil, err
	}
	r.cur.Store(cfg)
	return r, nil
}

// Load reads the files again and returns the configuration they make,
// without putting it in force (Store does).
func (r *Reloadable) Load() (*tls.Config, error) {
	cfg, err := Load(r.o)
	if err != nil {
		return nil, err
	}
	cfg.NextProtos = r.next
	return cfg, nil
}

// NotYetValidError is the error of a Reload or Store whose certificate is
// not valid yet while the one in force still is: the new one is held, and
// served from NotBefore on.
type NotYetValidError struct {
	Cert      string // the file
	NotBefore time.Time
}

func (e *NotYetValidError) Error() string {
	return fmt.Sprintf("%s: the certificate is not valid until %s; the certificate in force is served until then",
		e.Cert, e.NotBefore.UTC().Format(time.RFC3339))
}

// ExpiredError is the error of a Reload or Store whose certificate has
// expired while the one in force is still valid: the one in force stays
// (clients would refuse the new one), until it expires too.
type ExpiredError struct {
	Cert     string // the file
	NotAfter time.Time
}

func (e *ExpiredError) Error() string {
	return fmt.Sprintf("%s: the certificate expired at %s; the certificate in force is served while it is valid",
		e.Cert, e.NotAfter.UTC().Format(time.RFC3339))
}

// WhenInForce has f called with a certificate held until its NotBefore
// when it goes in force (during a handshake, or a call to Leaf). Call it
// before serving.
func (r *Reloadable) WhenInForce(f func(*x509.Certificate)) { r.inForce = f }

// Store puts cfg (from Load) in force for the next handshakes. It reports
// whether that changed what is served: another certificate chain or client
// CA bundle. A certificate not valid yet while the one in force is valid
// is held instead (the error is then a *NotYetValidError) and goes in
// force at its NotBefore, unless a later Store replaces it; one that has
// expired while the one in force is valid is not put in force (the error
// is then an *ExpiredError); either way cfg's client CA is in force at
// once.
func (r *Reloadable) Store(cfg *tls.Config) (changed bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	old := r.cur.Load()
	r.held.Store(nil)
	if leaf := cfg.Certificates[0].Leaf; leaf != nil && old != nil && !valid(cfg, now) && valid(old, now) {
		// Clients would refuse it: the one in force stays, with cfg's
		// client CA.
		keep := cfg.Clone()
		keep.Certificates = old.Certificates
		if now.Before(leaf.NotBefore) {
			r.held.Store(cfg)
			err = &NotYetValidError{Cert: r.o.Cert, NotBefore: leaf.NotBefore}
		} else {
			err = &ExpiredError{Cert: r.o.Cert, NotAfter: leaf.NotAfter}
		}
		cfg = keep
	}
	r.cur.Store(cfg)
	return old == nil || !slices.EqualFunc(old.Certificates[0].Certificate, cfg.Certificates[0].Certificate, bytes.Equal) ||
		(old.ClientCAs == nil) != (cfg.ClientCAs == nil) || (old.ClientCAs != nil && !old.ClientCAs.Equal(cfg.ClientCAs)), err
}

// valid reports whether cfg's certificate is valid at now.
func valid(cfg *tls.Config, now time.Time) bool {
	leaf := cfg.Certificates[0].Leaf
	return leaf == nil || (!now.Before(leaf.NotBefore) && !now.After(leaf.NotAfter))
}

// Reload reads the files again and puts what they make in force, as Store
// does. Files that do not load (a certificate whose key has not been
// written yet) change nothing and are the error. Calls to Reload and Store
// must not overlap.
func (r *Reloadable) Reload() (changed bool, err error) {
	cfg, err := r.Load()
	if err != nil {
		return false, err
	}
	return r.Store(cfg)
}

// current returns the configuration in force, first putting the held one
// in force if its time has come.
func (r *Reloadable) current() *tls.Config {
	h := r.held.Load()
	if h == nil || r.now().Before(h.Certificates[0].Leaf.NotBefore) {
		return r.cur.Load()
	}
	r.mu.Lock()
	promoted := r.held.CompareAndSwap(h, nil)
	if promoted {
		r.cur.Store(h)
	}
	r.mu.Unlock()
	if promoted && r.inForce != nil {
		r.inForce(h.Certificates[0].Leaf)
	}
	return r.cur.Load()
}

func (r *Reloadable) now() time.Time {
	if r.o.Now != nil {
		return r.o.Now()
	}
	return time.Now()
}

// Options returns the options r was made with (its files).
func (r *Reloadable) Options() Options { return r.o }

// Leaf returns the certificate in force.
func (r *Reloadable) Leaf() *x509.Certificate { return r.current().Certificates[0].Leaf }

// Config is the configuration to serve with: each handshake gets the one
// in force.
func (r *Reloadable) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: r.next,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return r.current(), nil
		},
	}
}
