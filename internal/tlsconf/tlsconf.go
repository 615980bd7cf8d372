// Package tlsconf builds the TLS configuration of the daemon's listeners
// (the decision API and proxy listeners' tls: blocks, and grpc.tls): a
// certificate and key, and for mutual TLS a client CA and an optional
// allow-list of client names; and that of the daemon's connections to
// Redis (store.redis.tls: LoadClient). Standard library only; the gRPC
// listener wraps the result in its transport credentials.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"
)

// Options are one tls: block, with its paths resolved.
type Options struct {
	Cert, Key string // PEM certificate (chain) and private key
	// ClientCA, if set, is a PEM bundle: clients must then present a
	// certificate it signed (mutual TLS).
	ClientCA string
	// ClientSANs, if set, are the names of which a client certificate must
	// carry one, each among the SANs of its kind: DNS names (in any case),
	// URIs (exactly), email addresses (the domain in any case, the local
	// part exactly) and IP addresses (in any spelling): "10.0.0.7",
	// "spiffe://mesh/ns/envoy". See Allowed.
	ClientSANs []string
	// Now is the clock a certificate's validity is judged by; nil means
	// time.Now.
	Now func() time.Time
}

// Error is a problem with one file of a tls: block: Field names the key
// (cert, key, client_ca), so that check-config can point at its line.
type Error struct {
	Field string
	Path  string
	Err   error
}

func (e *Error) Error() string {
	if e.Path == "" {
		return e.Err.Error()
	}
	return fmt.Sprintf("%s: %v", e.Path, e.Err)
}
func (e *Error) Unwrap() error { return e.Err }

// ErrSANNotAllowed is the handshake error of a client certificate that
// carries none of Options.ClientSANs.
var ErrSANNotAllowed = errors.New("tls: client certificate carries no allowed name")

// CipherSuites are the TLS 1.2 cipher suites served: the forward-secret
// AEAD ones (Mozilla's "intermediate" profile), which are also all that
// HTTP/2 allows over TLS 1.2 (RFC 9113 section 9.2.2). Go's defaults add
// the ECDHE CBC-SHA1 suites. TLS 1.3 has only AEAD suites.
var CipherSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// Load reads the files of o and returns a server configuration: TLS 1.2 or
// later (over TLS 1.2, the CipherSuites), the certificate, and with ClientCA, client certificates required
// and verified against it (and their names against ClientSANs). Each
// problem is an *Error naming its field and file.
func Load(o Options) (*tls.Config, error) {
	var errs []error
	cert, err := tls.LoadX509KeyPair(o.Cert, o.Key)
	if err != nil {
		errs = append(errs, pairError(o, err))
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		CipherSuites: slices.Clone(CipherSuites),
		Certificates: []tls.Certificate{cert},
	}
	if o.ClientCA != "" {
		pool, err := loadPool(o.ClientCA)
		if err != nil {
			errs = append(errs, &Error{Field: "client_ca", Path: o.ClientCA, Err: err})
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		if len(o.ClientSANs) > 0 {
			allowed := slices.Clone(o.ClientSANs)
			cfg.VerifyConnection = func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 || !Allowed(cs.PeerCertificates[0], allowed) {
					return ErrSANNotAllowed
				}
				return nil
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return cfg, nil
}

// pairError says which of the certificate and the key is at fault.
func pairError(o Options, err error) error {
	if _, rerr := os.ReadFile(o.Cert); rerr != nil {
		return &Error{Field: "cert", Path: o.Cert, Err: errors.Unwrap(rerr)}
	}
	if _, rerr := os.ReadFile(o.Key); rerr != nil {
		return &Error{Field: "key", Path: o.Key, Err: errors.Unwrap(rerr)}
	}
	if b, _ := os.ReadFile(o.Cert); !hasCert(b) {
		return &Error{Field: "cert", Path: o.Cert, Err: errors.New("no PEM certificate in it")}
	}
	if n := keyCertIndex(o); n > 1 {
		return &Error{Field: "cert", Path: o.Cert, Err: fmt.Errorf("the certificate of the key %s is certificate %d in it: it must come first, then its chain", o.Key, n)}
	}
	return &Error{Field: "key", Path: o.Key, Err: fmt.Errorf("with the certificate %s: %w", o.Cert, err)}
}

// keyCertIndex returns which certificate of o.Cert (from 1) the key o.Key
// belongs to, or 0.
func keyCertIndex(o Options) int {
	b, _ := os.ReadFile(o.Cert)
	key, _ := os.ReadFile(o.Key)
	for n := 1; ; {
		var blk *pem.Block
		if blk, b = pem.Decode(b); blk == nil {
			return 0
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		if _, err := tls.X509KeyPair(pem.EncodeToMemory(blk), key); err == nil {
			return n
		}
		n++
	}
}

// hasCert reports whether b holds a PEM certificate.
func hasCert(b []byte) bool {
	for {
		var blk *pem.Block
		if blk, b = pem.Decode(b); blk == nil {
			return false
		}
		if blk.Type == "CERTIFICATE" {
			return true
		}
	}
}

func loadPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, errors.Unwrap(err)
	}
	// Every certificate must parse (x509.CertPool.AppendCertsFromPEM
	// skips those that do not): a CA lost from the bundle would refuse
	// all its clients without a word.
	pool := x509.NewCertPool()
	n := 0
	for {
		var blk *pem.Block
		if blk, b = pem.Decode(b); blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		n++
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d in it: %w", n, err)
		}
		pool.AddCert(c)
	}
	if n == 0 {
		return nil, errors.New("no PEM certificate in it")
	}
	return pool, nil
}

// Allowed reports whether cert carries one of names. A name is of one
// kind, by its form, and matches the SANs of that kind only: an IP address
// the IP addresses (as addresses: "2001:DB8::1" matches 2001:db8::1,
// "::ffff:10.0.0.7" matches 10.0.0.7); a name with a colon (a scheme) the
// URIs, exactly; a name with an @ the email addresses (the domain without
// regard to case, the local part exactly: RFC 5321 lets a mail host tell
// Ops@ from ops@, RFC 5280 section 7.5 compares rfc822Names so); any other
// the DNS names, without regard to case, as DNS names are. So a DNS SAN
// that reads "10.0.0.7", or a URI SAN "gw.example" without a scheme (which
// a CA that vets one kind of name may let a client choose) is not the IP
// address or DNS name allowed.
func Allowed(cert *x509.Certificate, names []string) bool {
	for _, n := range names {
		if a, err := netip.ParseAddr(n); err == nil {
			if a.Zone() == "" && slices.ContainsFunc(cert.IPAddresses, func(ip net.IP) bool {
				b, ok := netip.AddrFromSlice(ip)
				return ok && b.Unmap() == a.Unmap()
			}) {
				return true
			}
			continue
		}
		var ok bool
		switch {
		case strings.Contains(n, ":"):
			ok = slices.ContainsFunc(cert.URIs, func(u *url.URL) bool { return u.String() == n })
		case strings.Contains(n, "@"):
			ok = slices.ContainsFunc(cert.EmailAddresses, func(e string) bool { return sameEmail(e, n) })
		default:
			ok = slices.ContainsFunc(cert.DNSNames, func(d string) bool { return strings.EqualFold(d, n) })
		}
		if ok {
			return true
		}
	}
	return false
}

// sameEmail reports whether the email addresses a and b are the same
// mailbox: the same local part, and the same domain in any case.
func sameEmail(a, b string) bool {
	i, j := strings.LastIndexByte(a, '@'), strings.LastIndexByte(b, '@')
	return i > 0 && j > 0 && a[:i] == b[:j] && strings.EqualFold(a[i+1:], b[j+1:])
}
