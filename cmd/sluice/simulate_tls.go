package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/internal/tlsconf"
	"github.com/sluicehq/sluice/redisstore"
)

// simTLSFlags are simulate's -redis-tls flags, which mirror
// store.redis.tls: -redis-tls is tls: true, and each file or name flag
// is a key of its mapping (which turns TLS on).
type simTLSFlags struct {
	on                        *bool
	ca, cert, key, serverName *string
}

func addSimTLSFlags(fs *flag.FlagSet) *simTLSFlags {
	return &simTLSFlags{
		on:         fs.Bool("redis-tls", false, "connect to -redis over TLS, as store.redis.tls: true: Redis's certificate is verified against the system's CA roots, or -redis-tls-ca's"),
		ca:         fs.String("redis-tls-ca", "", "the PEM CA bundle `FILE` that signs Redis's certificate, as store.redis.tls.ca (turns TLS on)"),
		cert:       fs.String("redis-tls-cert", "", "the PEM client certificate `FILE` for a Redis that asks for one (tls-auth-clients), as store.redis.tls.cert; needs -redis-tls-key (turns TLS on)"),
		key:        fs.String("redis-tls-key", "", "the PEM private key `FILE` of -redis-tls-cert, as store.redis.tls.key (turns TLS on)"),
		serverName: fs.String("redis-tls-server-name", "", "the `NAME` Redis's certificate is verified for, as store.redis.tls.server_name; default the host of -redis (turns TLS on)"),
	}
}

// simTLSFlagNames are the flags of simTLSFlags, for -store memory's
// refusal of them.
var simTLSFlagNames = []string{"redis-tls", "redis-tls-ca", "redis-tls-cert", "redis-tls-key", "redis-tls-server-name"}

// config reads the files of the flags as the daemon reads
// store.redis.tls's (tlsconf.LoadClient) and returns the configuration
// to connect with: nil without TLS. Each problem names its flag, and the
// file when it is about one.
func (f *simTLSFlags) config(fs *flag.FlagSet) (*tls.Config, error) {
	o := tlsconf.ClientOptions{CA: *f.ca, Cert: *f.cert, Key: *f.key, ServerName: *f.serverName}
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	var set []string // the flags given that turn TLS on
	for _, n := range simTLSFlagNames[1:] {
		if given[n] {
			set = append(set, "-"+n)
		}
	}
	switch {
	case given["redis-tls"] && !*f.on && len(set) > 0:
		return nil, fmt.Errorf("-redis-tls=false, with %s: those are TLS's; leave out one or the other", strings.Join(set, ", "))
	case !*f.on && len(set) == 0:
		return nil, nil
	}
	for _, p := range []struct{ name, path string }{{"redis-tls-ca", o.CA}, {"redis-tls-cert", o.Cert}, {"redis-tls-key", o.Key}} {
		if given[p.name] && p.path == "" {
			return nil, fmt.Errorf("-%s: empty path", p.name)
		}
	}
	switch {
	case o.Cert != "" && o.Key == "":
		return nil, errors.New("-redis-tls-cert needs -redis-tls-key: a client certificate and its private key go together")
	case o.Key != "" && o.Cert == "":
		return nil, errors.New("-redis-tls-key needs -redis-tls-cert: a private key and its client certificate go together")
	}
	c, err := tlsconf.LoadClient(o)
	if err == nil {
		return c, nil
	}
	var msgs []string
	for _, e := range unjoinErr(err) {
		var te *tlsconf.Error
		if errors.As(e, &te) {
			msgs = append(msgs, "-redis-tls-"+te.Field+": "+e.Error())
		} else {
			msgs = append(msgs, e.Error())
		}
	}
	return nil, errors.New(strings.Join(msgs, "\n"))
}

// unjoinErr returns the errors joined in err (errors.Join), or err alone.
func unjoinErr(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// simTLSHint names the flag to check when the TLS handshake with Redis
// failed (redisstore.ErrTLS), as the daemon names store.redis.tls's keys;
// "" for another error.
func simTLSHint(err error) string {
	names, name, mismatch := redisstore.TLSNameMismatch(err)
	switch {
	case !errors.Is(err, redisstore.ErrTLS):
		return ""
	case redisstore.TLSNeeded(err):
		return " (add -redis-tls: Redis serves only TLS at that address)"
	case redisstore.TLSRefusedByRedis(err):
		return " (Redis refused this client's TLS: check -redis-tls-cert and -redis-tls-key; with tls-auth-clients, Redis wants a client certificate that its tls-ca-cert-file signed)"
	case mismatch:
		return fmt.Sprintf(" (check -redis-tls-server-name: Redis's certificate is for %v, not %s; left out, it is the host of -redis)", names, name)
	default:
		return " (check -redis-tls-ca and Redis's certificate; without -redis-tls-ca, it is verified against the system's CA roots: on Linux SSL_CERT_FILE or SSL_CERT_DIR name others)"
	}
}
