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

func (t *RedisTLS) check(ck *checker) {
	const key = "store.redis.tls"
	switch {
	case t.Cert != "" && t.Key == "":
		ck.fail(key+".key", "missing: cert and key go together (a client certificate and its private key)")
	case t.Key != "" && t.Cert == "":
		ck.fail(key+".cert", "missing: cert and key go together (a client certificate and its private key)")
	}
	for _, f := range []struct{ name, path string }{{"ca", t.CA}, {"cert", t.Cert}} {
		if f.path != "" {
			ck.regular(key+"."+f.name, f.path)
		}
	}
	if t.Key != "" {
		ck.secretFile(key+".key", t.Key, "the private key")
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
	_, err := tlsconf.LoadClient(t.ClientOptions())
	if err == nil {
		return nil
	}
	var es Errors
	for _, e := range unjoin(err) {
		k := "store.redis.tls"
		var te *tlsconf.Error
		if errors.As(e, &te) {
			k += "." + te.Field
		}
		es = append(es, &rules.ParseError{File: c.File, Line: c.Line(k), Key: k, Msg: e.Error()})
	}
	return es
}
