package config

import (
	"errors"

	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/internal/tlsconf"
)

// RedisTLS is store.redis.tls: true or false, or a mapping of the files
// below, which turns TLS on. Without CA, Redis's certificate is verified
// against the system's roots; with Cert and Key the daemon presents a
// client certificate (Redis's tls-auth-clients). Paths are resolved
// against the config file's directory.
type RedisTLS struct {
	On   bool   `yaml:"-"`    // tls: true, or a mapping
	CA   string `yaml:"ca"`   // PEM CA bundle that signs Redis's certificate
	Cert string `yaml:"cert"` // PEM client certificate (chain)
	Key  string `yaml:"key"`  // PEM private key of Cert
	// ServerName is the name Redis's certificate is verified for; default
	// the host of the address dialled.
	ServerName string `yaml:"server_name"`
}

// setBool is tls: true or false; a mapping sets it true (see decoder).
func (t *RedisTLS) setBool(b bool) { t.On = b }

func (t *RedisTLS) check(ck *checker) { checkClientTLS(ck, "store.redis.tls", t.ClientOptions()) }

// checkClientTLS checks the files of a client TLS block at key (ca, cert,
// key): cert and key together, each a regular file, the key a secret one.
func checkClientTLS(ck *checker, key string, o tlsconf.ClientOptions) {
	switch {
	case o.Cert != "" && o.Key == "":
		ck.fail(key+".key", "missing: cert and key go together (a client certificate and its private key)")
	case o.Key != "" && o.Cert == "":
		ck.fail(key+".cert", "missing: cert and key go together (a client certificate and its private key)")
	}
	for _, f := range []struct{ name, path string }{{"ca", o.CA}, {"cert", o.Cert}} {
		if f.path != "" {
			ck.regular(key+"."+f.name, f.path)
		}
	}
	if o.Key != "" {
		ck.secretFile(key+".key", o.Key, "the private key")
	}
}

// ClientOptions returns t as tlsconf client options.
func (t *RedisTLS) ClientOptions() tlsconf.ClientOptions {
	return tlsconf.ClientOptions{CA: t.CA, Cert: t.Cert, Key: t.Key, ServerName: t.ServerName}
}

// redisTLSProblems loads store.redis.tls's files as the daemon does
// before it connects, and reports each that is not what its key says.
func (c *Config) redisTLSProblems() Errors {
	t := c.Store.Redis.TLS
	if c.Store.Type != StoreRedis || !t.On {
		return nil
	}
	return c.clientTLSProblems("store.redis.tls", t.ClientOptions())
}

// clientTLSProblems loads the files of the client TLS block at key as the
// daemon does, and reports each that is not what its key says.
func (c *Config) clientTLSProblems(key string, o tlsconf.ClientOptions) Errors {
	_, err := tlsconf.LoadClient(o)
	if err == nil {
		return nil
	}
	var es Errors
	for _, e := range unjoin(err) {
		k := key
		var te *tlsconf.Error
		if errors.As(e, &te) {
			k += "." + te.Field
		}
		es = append(es, &rules.ParseError{File: c.File, Line: c.Line(k), Key: k, Msg: e.Error()})
	}
	return es
}
