package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
)

// The store's scripts, and the daemon's features, run commands and
// arguments that older Redis servers lack (XAUTOCLAIM: 6.2; TIME before
// a write in a script: 5.0). Such a server fails them at every call, as
// an unknown command or a wrong argument, which the caller takes for an
// outage. So New reads each server's version once (INFO server, on every
// node of a Cluster) and refuses one older than the store's scripts or a
// feature among Options.Needs (Need.MinRedis) with ErrVersion, naming the
// feature, the version it needs and the version found; Require checks a
// caller's new needs against the versions read last, and CheckVersions
// the servers RunIDs met since (those that replaced others).

// serverVersion is what a server tells of itself in INFO server.
type serverVersion struct {
	addr  string
	redis string // redis_version: Valkey keeps the one it forked from (7.2.4)
	name  string // server_name, when not "redis" ("valkey")
	own   string // the version of name (valkey_version)
}

// String is the version as an error tells it: "6.0.16", or "valkey 8.0.1
// (redis_version 7.2.4)".
func (v serverVersion) String() string {
	if v.name != "" && v.own != "" {
		return fmt.Sprintf("%s %s (redis_version %s)", v.name, v.own, v.redis)
	}
	return v.redis
}

// infoVersion reads a server's version from its INFO server reply.
func infoVersion(addr, info string) serverVersion {
	v := serverVersion{addr: addr}
	fields := map[string]string{}
	for line := range strings.Lines(info) {
		if k, val, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = val
		}
	}
	v.redis = fields["redis_version"]
	if n := fields["server_name"]; n != "" && n != "redis" {
		v.name, v.own = n, fields[n+"_version"]
	}
	return v
}

// serverVersions reads the version of each node of c (the one server, a
// Sentinel's master, every Cluster node the client knows), sorted by
// address. A node that does not answer INFO (a timeout, an ACL without
// it) is left out: it cannot tell, and the store's calls will.
func serverVersions(ctx context.Context, c rueidis.Client) []serverVersion {
	var vs []serverVersion
	for addr, n := range c.Nodes() {
		info, err := n.Do(ctx, n.B().Info().Section("server").Build()).ToString()
		if err != nil {
			continue
		}
		vs = append(vs, infoVersion(addr, info))
	}
	slices.SortFunc(vs, func(a, b serverVersion) int { return strings.Compare(a.addr, b.addr) })
	return vs
}

// parseVersion reads a version such as "7.0.15" or "6.2" (the missing
// parts 0) as its major, minor and patch numbers.
func parseVersion(s string) ([3]int, error) {
	var v [3]int
	parts := strings.Split(s, ".")
	if s == "" || len(parts) > 3 {
		return v, fmt.Errorf("redisstore: version %q is not MAJOR.MINOR[.PATCH]", s)
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || p[0] == '+' || p[0] == '-' {
			return v, fmt.Errorf("redisstore: version %q is not MAJOR.MINOR[.PATCH]", s)
		}
		v[i] = n
	}
	return v, nil
}

// compareVersions returns -1, 0 or +1 as version a is older than, the
// same as or newer than b ("6.2" is "6.2.0"); an error when either is no
// version. Redis built from its unstable branch tells 255.255.255, newer
// than every release.
func compareVersions(a, b string) (int, error) {
	va, err := parseVersion(a)
	if err != nil {
		return 0, err
	}
	vb, err := parseVersion(b)
	if err != nil {
		return 0, err
	}
	return slices.Compare(va[:], vb[:]), nil
}

// checkNeeds reports a need whose MinRedis is no version.
func checkNeeds(needs []Need) error {
	for _, n := range needs {
		if n.MinRedis == "" {
			continue
		}
		if _, err := parseVersion(n.MinRedis); err != nil {
			return fmt.Errorf("needs: %s: min redis: %w", n.Feature, err)
		}
	}
	return nil
}

// ownNeed is what the store's own scripts need of Redis.
func (o Options) ownNeed() Need {
	if o.RedisTime {
		return Need{Feature: "the store on Redis's clock (RedisTime)", MinRedis: "5.0",
			MinRedisFor: "TIME before writes in its scripts, replicated by their effects", own: true}
	}
	return Need{Feature: "the store", MinRedis: "4.0", MinRedisFor: "HSET of several fields in its scripts", own: true}
}

// tooOld returns, as a *versionError (op "connect", "require" or "check"), the
// needs that servers are too old for, each with the servers; nil when
// none is. A server whose version is no version (a proxy's) is not
// refused: it cannot tell.
func tooOld(op string, addrs []string, servers []serverVersion, needs []Need) error {
	// The needs refused, grouped by the servers too old for them (in the
	// order of the needs): "A needs …, B needs …; ADDR runs V".
	var olds []string
	refused := map[string][]string{}
	own := false
	for _, n := range needs {
		if n.MinRedis == "" {
			continue
		}
		var old []string
		for _, s := range servers {
			if c, err := compareVersions(s.redis, n.MinRedis); err == nil && c < 0 {
				old = append(old, s.addr+" runs "+s.String())
			}
		}
		if len(old) == 0 {
			continue
		}
		own = own || n.own
		k := strings.Join(old, ", ")
		if refused[k] == nil {
			olds = append(olds, k)
		}
		refused[k] = append(refused[k], fmt.Sprintf("%s needs Redis %s or later (%s)", n.Feature, n.MinRedis, n.MinRedisFor))
	}
	if len(olds) == 0 {
		return nil
	}
	what := make([]string, len(olds))
	for i, k := range olds {
		what[i] = strings.Join(refused[k], ", ") + "; " + k
	}
	return &versionError{op: op, addrs: addrs, what: strings.Join(what, "; "), own: own}
}

// StoreTooOld reports whether err (ErrVersion of New or CheckVersions)
// refuses a server too old for the store's own scripts (Redis 4.0, or
// 5.0 with Options.RedisTime), which leaving out a feature (a Need) does
// not mend: only a newer Redis does.
func StoreTooOld(err error) bool {
	var ve *versionError
	return errors.As(err, &ve) && ve.own
}

// CheckVersions checks, as New does, that the servers are recent enough
// for the store's scripts and for needs (Need.MinRedis), against the
// versions the last RunIDs read (New's, before any): a server that took
// another's place since New connected (a failover to a replica on an
// older Redis, a restart on an older binary, a Cluster node added) is
// checked once RunIDs has met it. It fails with ErrVersion naming each
// feature, the version it needs and the servers too old for it, as New
// would (op "check"); nil when every server is recent enough, or cannot
// tell. It asks Redis nothing, and changes nothing.
func (s *Store) CheckVersions(needs []Need) error {
	if err := checkNeeds(needs); err != nil {
		return fmt.Errorf("redisstore: check: %w", err)
	}
	return tooOld("check", s.opts.Addrs, s.versions(), append([]Need{s.opts.ownNeed()}, needs...))
}

// versions are the servers' versions read last (New's, then RunIDs').
func (s *Store) versions() []serverVersion {
	if p := s.servers.Load(); p != nil {
		return *p
	}
	return nil
}

// versionError is the error of a server older than a need (ErrVersion).
type versionError struct {
	op    string
	addrs []string
	what  string
	own   bool // the store's own need among those refused (StoreTooOld)
}

func (e *versionError) Error() string {
	return fmt.Sprintf("redisstore: %s %v: %s", e.op, e.addrs, e.what)
}

func (e *versionError) Unwrap() []error { return []error{ErrVersion, sluice.ErrStoreUnavailable} }

// Redis before 6.0 has no ACL users: its AUTH takes the password alone,
// and a client that authenticates with a username (rueidis: HELLO 3 AUTH
// user password, then, HELLO being unknown there, AUTH user password) is
// answered "ERR wrong number of arguments for 'auth' command" before
// INFO can tell the version. A Sentinel has had ACL users since 6.2 (its
// AUTH took the password alone until then).
const (
	usernameMinRedis    = "6.0"
	usernameMinSentinel = "6.2"
)

// older reports whether version v is older than min; false when v is no
// version (a proxy's: it cannot tell).
func older(v, min string) bool {
	c, err := compareVersions(v, min)
	return err == nil && c < 0
}

// authArityRefused reports whether err is a server answering AUTH with a
// username as a wrong number of arguments (rueidis drops the "ERR ").
func authArityRefused(err error) bool {
	var re *rueidis.RedisError
	if !errors.As(err, &re) {
		return false
	}
	return strings.HasPrefix(strings.TrimPrefix(re.Error(), "ERR "), "wrong number of arguments for 'auth' command")
}

// usernameError is a server too old for the username it was given
// (ErrVersion): it answered AUTH with a username as a wrong number of
// arguments.
type usernameError struct {
	op       string
	addrs    []string
	user     string
	sentinel string // the Sentinel's address, when a Sentinel answered
	// version is the Sentinel's, when it refused the username as a wrong
	// password (6.0 and 6.1, which have no ACL users of their own).
	version string
	err     error // the server's answer
}

func (e *usernameError) Error() string {
	if e.sentinel != "" && e.version != "" {
		return fmt.Sprintf("redisstore: %s %v: the Sentinels' username %q needs Sentinels of Redis %s or later (ACL users in Sentinel): the Sentinel at %s runs %s, which knows no user but the default one, and refused it: %v",
			e.op, e.addrs, e.user, usernameMinSentinel, e.sentinel, e.version, e.err)
	}
	if e.sentinel != "" {
		return fmt.Sprintf("redisstore: %s %v: the Sentinels' username %q needs Sentinels of Redis %s or later (ACL users in Sentinel): the Sentinel at %s answered AUTH with a username: %v",
			e.op, e.addrs, e.user, usernameMinSentinel, e.sentinel, e.err)
	}
	return fmt.Sprintf("redisstore: %s %v: username %q needs Redis %s or later (ACL users; before, AUTH takes the password alone): Redis answered AUTH with a username: %v",
		e.op, e.addrs, e.user, usernameMinRedis, e.err)
}

func (e *usernameError) Unwrap() []error {
	return []error{ErrVersion, sluice.ErrStoreUnavailable, e.err}
}

// UsernameTooOld reports whether err (of New, Ping or Require) is
// ErrVersion because a server older than Redis 6.0, which has no ACL
// users, refused AUTH with a username (Options.Username), and whether
// that server was a Sentinel refusing the Sentinels' (one older than
// 6.2).
func UsernameTooOld(err error) (tooOld, sentinel bool) {
	var ue *usernameError
	if !errors.As(err, &ue) {
		return false, false
	}
	return true, ue.sentinel != ""
}

// usernameRefusal returns err, of an op with o, as a *usernameError when
// it is the master (or the one server) refusing Options.Username for its
// version, else nil.
func usernameRefusal(op string, o Options, err error) error {
	if o.Username == "" || !authArityRefused(err) {
		return nil
	}
	return &usernameError{op: op, addrs: o.Addrs, user: o.Username, err: err}
}
