package redisstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"slices"
	"strings"
	"syscall"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
)

// Errors of New when Redis answered but refused the connection, which,
// unlike a Redis that does not answer, does not pass by itself: the
// options (or Redis's users, or certificates) must change. Each also wraps
// sluice.ErrStoreUnavailable.
var (
	// ErrAuth: Redis refused the credentials (Options.Username and
	// Password): a wrong password or user (WRONGPASS), none given where
	// one is needed (NOAUTH), a user not allowed to connect (NOPERM).
	ErrAuth = errors.New("redisstore: Redis refused the credentials")
	// ErrTLS: the TLS handshake (Options.TLS) failed: Redis's
	// certificate is not trusted by the client (an unknown authority, a
	// name or time it is not valid for), Redis does not speak TLS there,
	// or it refused the client's TLS (a client certificate missing or not
	// trusted: RemoteTLSAlert); or, Options.TLS unset, Redis speaks only
	// TLS there (TLSNeeded).
	ErrTLS = errors.New("redisstore: TLS with Redis failed")
	// ErrDB: Redis has no database Options.DB (SELECT answered that
	// the number is out of range: past its databases setting, 16 by
	// default).
	ErrDB = errors.New("redisstore: Redis has no such database")
	// ErrVersion: a server is older than what the store's scripts, or a
	// feature among Options.Needs (Need.MinRedis), run. Each server's
	// version is read once, as New connects (INFO server).
	ErrVersion = errors.New("redisstore: Redis is too old")
)

// refusedError is New's error when Redis refused the connection.
type refusedError struct {
	op    string // "connect" or "ping"
	addrs []string
	what  string // what was refused, for the message
	kind  error  // ErrAuth, ErrTLS or ErrDB
	err   error
	// byRedis: Redis refused the client's TLS (its certificate, or its
	// absence), rather than the client Redis's certificate.
	byRedis bool
	// needsTLS: Options.TLS unset, and Redis serves only TLS there.
	needsTLS bool
	// bySentinel: the Sentinels refused their credentials.
	bySentinel bool
}

func (e *refusedError) Error() string {
	return fmt.Sprintf("redisstore: %s %v: %s: %v", e.op, e.addrs, e.what, e.err)
}

func (e *refusedError) Unwrap() []error { return []error{e.kind, sluice.ErrStoreUnavailable, e.err} }

// refused returns err as a *refusedError when it is one of the refusals
// of ErrAuth, ErrTLS or ErrDB, else nil.
func refused(o Options, err error) error {
	if re, ok := rueidis.IsRedisErr(err); ok && strings.Contains(re.Error(), "DB index is out of range") {
		return &refusedError{op: "connect", addrs: o.Addrs, kind: ErrDB, err: err,
			what: fmt.Sprintf("Redis has no database %d (its databases setting, 16 by default, bounds the numbers)", o.DB)}
	}
	if refusedCredentials(err) {
		who := "the default user (no username)"
		if o.Username != "" {
			who = fmt.Sprintf("user %q", o.Username)
		}
		if c := deniedCommand(err); c != "" {
			// The credentials passed; the ACL refused a command the
			// client runs as it connects.
			what := "Redis's ACL does not let " + who + " run " + c + ", which the client runs as it connects"
			if c == "CLUSTER SLOTS" || c == "CLUSTER SHARDS" {
				what += " (for the Cluster's slot map)"
			}
			return &refusedError{op: "connect", addrs: o.Addrs, what: what, kind: ErrAuth, err: err}
		}
		return &refusedError{op: "connect", addrs: o.Addrs, what: "Redis refused the credentials of " + who, kind: ErrAuth, err: err}
	}
	if o.TLS != nil && tlsRefused(err) {
		return &refusedError{op: "connect", addrs: o.Addrs, what: "the TLS handshake failed", kind: ErrTLS, err: err, byRedis: remoteTLSAlert(err)}
	}
	return nil
}

// sentinelCredentials are what the Sentinels get (SentinelCredentials,
// or the master's).
func (o Options) sentinelCredentials() Credentials {
	if c := o.SentinelCredentials; c != nil {
		return *c
	}
	return Credentials{o.Username, o.Password}
}

// SentinelRefused reports whether err (of New) is ErrAuth because the
// Sentinels refused the credentials they get (Options.SentinelCredentials,
// or the master's), not the master.
func SentinelRefused(err error) bool {
	var re *refusedError
	return errors.As(err, &re) && re.bySentinel
}

// refusedAfterHandshake returns err as an ErrTLS *refusedError when it is
// the connection closed by Redis (reset, or at its end) after a TLS
// handshake, with the node at addr, in which Redis asked for a client
// certificate: Redis (tls-auth-clients) refused the certificate given,
// or its absence. Over TLS 1.3 it sends its alert after the client's side
// of the handshake is done, and the client's first write, meeting the
// closed connection, loses it. addr "" (no such handshake): nil.
func refusedAfterHandshake(o Options, addr string, err error) error {
	if o.TLS == nil || addr == "" || !closedByPeer(err) {
		return nil
	}
	return &refusedError{op: "connect", addrs: o.Addrs, kind: ErrTLS, err: err, byRedis: true,
		what: "Redis at " + addr + " asked for a client certificate in the TLS handshake, then closed the connection: it refused the certificate given, or its absence"}
}

// plainToTLS returns, as a *refusedError of ErrTLS, err of a connection
// without TLS that one of o.Addrs closed unanswered because it serves
// only TLS there (servesTLS), else nil.
func plainToTLS(ctx context.Context, o Options, err error) error {
	if o.TLS != nil || !closedByPeer(err) {
		return nil
	}
	if a := servesTLS(ctx, o.Addrs); a != "" {
		return &refusedError{op: "connect", addrs: o.Addrs, what: a + " serves TLS, and the connection does not use it", kind: ErrTLS, err: err, needsTLS: true}
	}
	return nil
}

// servesTLS returns the first of addrs that completes a TLS handshake
// (its certificate not checked) or answers one with a TLS alert, or "".
// New asks when a connection without TLS was closed on it without a reply:
// what a port that serves only TLS does to a command it reads as a broken
// client hello.
func servesTLS(ctx context.Context, addrs []string) string {
	var d net.Dialer
	for _, a := range addrs {
		c, err := d.DialContext(ctx, "tcp", a)
		if err != nil {
			continue
		}
		host, _, _ := net.SplitHostPort(a)
		t := tls.Client(c, &tls.Config{ServerName: host, InsecureSkipVerify: true}) // only asking whether TLS answers
		err = t.HandshakeContext(ctx)
		c.Close()
		if err == nil || remoteTLSAlert(err) {
			return a
		}
	}
	return ""
}

// closedByPeer reports whether err is a connection reset or closed by
// the other side.
func closedByPeer(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// noPermCommand matches the command in Redis's NOPERM for a command
// (Redis 7: "NOPERM this user has no permissions to run the 'cluster|slots'
// command"; Redis 6: "NOPERM this user has no permissions to run the
// 'cluster' command or its subcommand").
var noPermCommand = regexp.MustCompile(`^NOPERM .*run the '([^']+)' command`)

// deniedCommand returns the command, upper case with its subcommand
// ("CLUSTER SLOTS"), that Redis's NOPERM in err names, or "".
func deniedCommand(err error) string {
	var re *rueidis.RedisError
	if !errors.As(err, &re) {
		return ""
	}
	m := noPermCommand.FindStringSubmatch(re.Error())
	if m == nil {
		return ""
	}
	return strings.ToUpper(strings.ReplaceAll(m[1], "|", " "))
}

// refusedCredentials reports whether err is Redis refusing to let the
// client in: AUTH or HELLO answered WRONGPASS, NOAUTH or NOPERM, or "ERR
// AUTH <password> called without any password configured" (a password
// sent to a Redis that has none for the default user; Redis before 6:
// "ERR Client sent AUTH, but no password is set"), or "ERR invalid
// password" (Redis before 6). rueidis drops an error's "ERR ", so the
// words are matched without it.
func refusedCredentials(err error) bool {
	var re *rueidis.RedisError
	if !errors.As(err, &re) {
		return false
	}
	msg := strings.TrimPrefix(re.Error(), "ERR ")
	for _, p := range []string{"WRONGPASS", "NOAUTH", "NOPERM", "AUTH <password> called without", "Client sent AUTH, but no password is set", "invalid password", "invalid username"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// tlsRefused reports whether err is a TLS handshake that failed for good:
// the certificate not verified, a reply that is not TLS, an alert from
// the server. Over TLS 1.3 a server that refuses the client's certificate,
// or its absence (Redis's tls-auth-clients yes), says so after the
// client's side of the handshake is done: its alert comes with the first
// read, as a *net.OpError "remote error" (crypto/tls's alert type is not
// tls.AlertError, which is QUIC's).
func tlsRefused(err error) bool {
	return remoteTLSAlert(err) || tlsVerifyFailed(err)
}

// tlsVerifyFailed reports whether err is the client refusing the server's
// certificate, or a reply that is not TLS.
func tlsVerifyFailed(err error) bool {
	var ve *tls.CertificateVerificationError
	var rh tls.RecordHeaderError
	var al tls.AlertError
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	return errors.As(err, &ve) || errors.As(err, &rh) || errors.As(err, &al) ||
		errors.As(err, &ua) || errors.As(err, &he) || errors.As(err, &ci)
}

// TLSRefusedByRedis reports whether err (of New) is ErrTLS because Redis
// refused the client's TLS (with tls-auth-clients: the client certificate
// given, or its absence), not the client Redis's certificate.
func TLSRefusedByRedis(err error) bool {
	var re *refusedError
	return errors.As(err, &re) && re.byRedis
}

// TLSNeeded reports whether err (of New) is ErrTLS because Options.TLS
// was unset and Redis serves only TLS at one of its addresses.
func TLSNeeded(err error) bool {
	var re *refusedError
	return errors.As(err, &re) && re.needsTLS
}

// TLSNameMismatch reports whether err (of New) is ErrTLS because Redis's
// certificate is not for the name the client checked it against, and if
// so the names it is for (DNS names, then IP addresses) and that name.
func TLSNameMismatch(err error) (certNames []string, name string, ok bool) {
	var he x509.HostnameError
	if !errors.Is(err, ErrTLS) || !errors.As(err, &he) {
		return nil, "", false
	}
	certNames = slices.Clone(he.Certificate.DNSNames)
	for _, ip := range he.Certificate.IPAddresses {
		certNames = append(certNames, ip.String())
	}
	return certNames, he.Host, true
}

// remoteTLSAlert reports whether err is a TLS alert sent by the server
// (such as "certificate required" or "bad certificate").
func remoteTLSAlert(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "remote error"
}
