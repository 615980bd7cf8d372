package config

import (
	"errors"
	"path/filepath"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/internal/tlsconf"
)

// Listener is the client side of an HTTP listener: the keys shared by the
// api and proxy blocks.
type Listener struct {
	// ReadHeaderTimeout bounds reading a client's request headers.
	// Default server.DefaultReadHeaderTimeout (10s).
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	// BodyReadTimeout is the longest wait between two reads of a request
	// body (nginx's client_body_timeout): a body that stalls longer is cut
	// (408) and its connection closed; an upload that keeps moving is never
	// cut. Default listener.DefaultBodyReadTimeout (30s).
	BodyReadTimeout time.Duration `yaml:"body_read_timeout"`
	// IdleTimeout closes idle client keep-alive connections. Default
	// server.DefaultIdleTimeout (120s).
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// SendTimeout is the longest wait between two writes to a client that
	// make progress (nginx's send_timeout): a client that stops reading its
	// answer is cut after it; one that reads slowly but keeps reading is
	// never cut. Default listener.DefaultSendTimeout (60s).
	SendTimeout time.Duration `yaml:"send_timeout"`
	// MaxConnections caps the client connections held at once; one more is
	// closed at once. It also caps the HTTP/2 requests served at once (one
	// more is answered 503). Default listener.DefaultMaxConnections (10000).
	MaxConnections int `yaml:"max_connections"`
	// TLS, if set, serves HTTPS (mTLS with ClientCA).
	TLS *TLSConfig `yaml:"tls"`
}

// MaxMaxConnections bounds max_connections.
const MaxMaxConnections = 1_000_000

func (l *Listener) defaults(file string) {
	setDefault(&l.ReadHeaderTimeout, server.DefaultReadHeaderTimeout)
	setDefault(&l.IdleTimeout, server.DefaultIdleTimeout)
	setDefault(&l.BodyReadTimeout, listener.DefaultBodyReadTimeout)
	setDefault(&l.SendTimeout, listener.DefaultSendTimeout)
	setDefault(&l.MaxConnections, listener.DefaultMaxConnections)
	if l.TLS != nil {
		l.TLS.defaults(file)
	}
}

// check checks l, the listener of the block named block ("api", "proxy").
func (l *Listener) check(ck *checker, block string) {
	ck.between(block+".read_header_timeout", l.ReadHeaderTimeout, time.Millisecond, time.Hour)
	ck.between(block+".idle_timeout", l.IdleTimeout, time.Millisecond, 24*time.Hour)
	ck.between(block+".body_read_timeout", l.BodyReadTimeout, time.Millisecond, time.Hour)
	ck.between(block+".send_timeout", l.SendTimeout, time.Millisecond, time.Hour)
	if n := l.MaxConnections; n < 1 || n > MaxMaxConnections {
		ck.fail(block+".max_connections", "%d must be between 1 and %d", n, MaxMaxConnections)
	}
	if l.TLS != nil {
		l.TLS.check(ck, block+".tls")
	}
}

// TLSConfig is a listener's TLS: a certificate and key, and for mutual TLS
// the CA that signs client certificates and, optionally, the client names
// (SANs) allowed. Paths are resolved against the config file's directory.
type TLSConfig struct {
	Cert     string `yaml:"cert"`      // PEM certificate (chain)
	Key      string `yaml:"key"`       // PEM private key
	ClientCA string `yaml:"client_ca"` // PEM CA bundle; set: clients must present a certificate it signed
	// ClientSANs, if set, are the DNS, URI, email or IP SANs of which a
	// client certificate must carry one, each among the SANs of its kind
	// (tlsconf.Allowed). Needs ClientCA.
	ClientSANs []string `yaml:"client_sans"`
}

func (t *TLSConfig) defaults(file string) {
	resolvePath(file, &t.Cert)
	resolvePath(file, &t.Key)
	resolvePath(file, &t.ClientCA)
}

func (t *TLSConfig) check(ck *checker, key string) {
	if t.Cert == "" {
		ck.fail(key+".cert", "missing: TLS needs a certificate file (PEM), such as server.pem")
	} else {
		ck.regular(key+".cert", t.Cert)
	}
	if t.Key == "" {
		ck.fail(key+".key", "missing: TLS needs a private key file (PEM), such as server-key.pem")
	} else {
		ck.secretFile(key+".key", t.Key, "the private key")
	}
	if t.ClientCA != "" {
		ck.regular(key+".client_ca", t.ClientCA)
	}
	if len(t.ClientSANs) > 0 && t.ClientCA == "" {
		ck.fail(key+".client_sans", "needs client_ca: client names are checked on client certificates (mTLS)")
	}
	for i, s := range t.ClientSANs {
		if s == "" {
			ck.fail(key+".client_sans["+strconv.Itoa(i)+"]", "empty name")
		}
	}
}

// TLSProblems loads the certificates, keys and CAs of every tls: block of
// c (tlsconf.Load, and tlsconf.LoadClient for store.redis.tls), as serve
// does before it listens, and reports each file
// that is not what its key says, naming file, line and key. Check only
// sees that the paths exist.
func (c *Config) TLSProblems() error {
	var es Errors
	each := func(key string, t *TLSConfig) {
		if t == nil {
			return
		}
		if _, err := tlsconf.Load(t.Options()); err != nil {
			for _, e := range unjoin(err) {
				k := key
				var te *tlsconf.Error
				if errors.As(e, &te) {
					k = key + "." + te.Field
				}
				es = append(es, &rules.ParseError{File: c.File, Line: c.Line(k), Key: k, Msg: e.Error()})
			}
		}
	}
	each("api.tls", c.API.TLS)
	if c.Proxy != nil {
		each("proxy.tls", c.Proxy.TLS)
	}
	if c.GRPC != nil {
		each("grpc.tls", c.GRPC.TLS)
	}
	es = append(es, c.redisTLSProblems()...)
	es = append(es, c.xdsTLSProblems()...)
	return es.Err()
}

// TLSWarnings names the certificates that load but that clients will
// refuse at now: not valid yet, or expired. serve starts with them (and
// says so in its log); check-config prints these.
func (c *Config) TLSWarnings(now time.Time) []*rules.ParseError {
	var ws []*rules.ParseError
	each := func(key string, t *TLSConfig) {
		if t == nil {
			return
		}
		cfg, err := tlsconf.Load(t.Options())
		if err != nil || len(cfg.Certificates) == 0 || cfg.Certificates[0].Leaf == nil {
			return // TLSProblems's to report
		}
		leaf, k := cfg.Certificates[0].Leaf, key+".cert"
		var msg string
		switch {
		case now.Before(leaf.NotBefore):
			msg = "warning: " + t.Cert + ": the certificate is not valid until " + leaf.NotBefore.UTC().Format(time.RFC3339) + "; clients will refuse it until then"
		case now.After(leaf.NotAfter):
			msg = "warning: " + t.Cert + ": the certificate expired on " + leaf.NotAfter.UTC().Format(time.RFC3339) + "; clients will refuse it"
		default:
			return
		}
		ws = append(ws, &rules.ParseError{File: c.File, Line: c.Line(k), Key: k, Msg: msg})
	}
	each("api.tls", c.API.TLS)
	if c.Proxy != nil {
		each("proxy.tls", c.Proxy.TLS)
	}
	if c.GRPC != nil {
		each("grpc.tls", c.GRPC.TLS)
	}
	return ws
}

// Options returns t as tlsconf options.
func (t *TLSConfig) Options() tlsconf.Options {
	return tlsconf.Options{Cert: t.Cert, Key: t.Key, ClientCA: t.ClientCA, ClientSANs: t.ClientSANs}
}

// unjoin splits an errors.Join.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// resolvePath makes a relative path relative to the config file's
// directory (file "" leaves it as it is).
func resolvePath(file string, p *string) {
	if file != "" && *p != "" && !filepath.IsAbs(*p) {
		*p = filepath.Join(filepath.Dir(file), *p)
	}
}
