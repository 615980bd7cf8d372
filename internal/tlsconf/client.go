package tlsconf

import (
	"crypto/tls"
	"errors"
)

// ClientOptions are the TLS of a connection the daemon makes (to Redis:
// store.redis.tls), with their paths resolved. All are optional.
type ClientOptions struct {
	// CA, if set, is a PEM bundle: the server's certificate must be signed
	// by one of its CAs (else the system's roots).
	CA string
	// Cert and Key, if set, are the PEM client certificate (chain) and
	// private key presented to a server that asks for one.
	Cert, Key string
	// ServerName, if set, is the name the server's certificate is
	// verified for (else the host dialled).
	ServerName string
}

// LoadClient reads the files of o and returns a client configuration: TLS
// 1.2 or later, o's roots, client certificate and server name. Each
// problem is an *Error naming its field (ca, cert, key) and file.
func LoadClient(o ClientOptions) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.ServerName}
	var errs []error
	if o.CA != "" {
		pool, err := loadPool(o.CA)
		if err != nil {
			errs = append(errs, &Error{Field: "ca", Path: o.CA, Err: err})
		}
		cfg.RootCAs = pool
	}
	switch {
	case o.Cert != "" && o.Key != "":
		cert, err := tls.LoadX509KeyPair(o.Cert, o.Key)
		if err != nil {
			errs = append(errs, pairError(Options{Cert: o.Cert, Key: o.Key}, err))
		}
		cfg.Certificates = []tls.Certificate{cert}
	case o.Cert != "":
		errs = append(errs, &Error{Field: "key", Err: errors.New("missing: the client certificate needs its key")})
	case o.Key != "":
		errs = append(errs, &Error{Field: "cert", Err: errors.New("missing: the key needs its client certificate")})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return cfg, nil
}
