package config

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/rules"
)

// UnixScheme starts a listen or grpc.listen value that names a Unix
// socket: unix:/run/sluice/api.sock.
const UnixScheme = "unix:"

// UnixPath returns the socket path of a listen address written
// unix:/PATH, and whether addr is one.
func UnixPath(addr string) (string, bool) {
	return strings.CutPrefix(addr, UnixScheme)
}

// MaxUnixPath is the longest socket path the system binds: sun_path
// holds 108 bytes on Linux (104 on the BSDs and macOS), the last one the
// terminating NUL.
var MaxUnixPath = func() int {
	if runtime.GOOS == "linux" {
		return 107
	}
	return 103
}()

// unixProblem returns what is wrong with the socket path of a
// unix:PATH listen address, or "": it must be absolute, fit sun_path,
// and name a file in a directory that exists.
func unixProblem(path string) string {
	switch {
	case path == "":
		return "no socket path: want unix:/absolute/path, such as unix:/run/sluice/api.sock"
	case !filepath.IsAbs(path):
		return "the socket path " + path + " is not absolute: want unix:/absolute/path, such as unix:/run/sluice/api.sock"
	case len(path) > MaxUnixPath:
		return "the socket path is " + strconv.Itoa(len(path)) + " bytes, longer than the " + strconv.Itoa(MaxUnixPath) + " a Unix socket's address holds here: pick a shorter one"
	case strings.HasSuffix(path, "/"):
		return "the socket path " + path + " names a directory: want the socket's own name, such as /run/sluice/api.sock"
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	switch {
	case err != nil:
		return "the socket's directory " + dir + ": " + errors.Unwrap(err).Error() + " (create it first)"
	case !fi.IsDir():
		return "the socket's directory " + dir + " is not a directory"
	}
	// serve replaces a socket left by a daemon killed before it removed
	// it, and refuses to start over anything else.
	if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() != fs.ModeSocket {
		return NotSocket(path, fi.Mode())
	}
	return ""
}

// NotSocket is what is wrong with a Unix listen path at which a file of
// mode m, not a socket, stands: serve refuses to bind there (it replaces
// only a socket a killed daemon left), and check-config says so first.
func NotSocket(path string, m fs.FileMode) string {
	return path + " is not a socket (" + fileKind(m) + "); it is left alone: remove it, or pick another path"
}

// fileKind names the kind of file of mode m: "a regular file", "a
// directory", "a symbolic link".
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "a " + m.Type().String() + " file"
}

// listenProblem returns what is wrong with the listen address addr of a
// listener that may (unixOK) or may not be a Unix socket, or "".
func listenProblem(addr string, unixOK bool) string {
	path, unix := UnixPath(addr)
	switch {
	case unix && unixOK:
		return unixProblem(path)
	case unix:
		return "a Unix socket is for listen and grpc.listen; this listener is TCP only: want host:port, such as 127.0.0.1:8000"
	}
	return addrProblem(addr)
}

// sameListen returns addr as two listeners on one socket write it alike:
// a Unix socket's path cleaned (unix:/run//a.sock is unix:/run/a.sock).
func sameListen(addr string) string {
	if path, unix := UnixPath(addr); unix && path != "" {
		return UnixScheme + filepath.Clean(path)
	}
	return addr
}

// TrustedProxy is an entry of client_ip.trusted_proxies: a CIDR or a
// single address, or "unix:", which trusts the peers of the Unix-socket
// listeners (as nginx's set_real_ip_from unix:).
type TrustedProxy struct {
	Prefix netip.Prefix // valid unless Unix
	Unix   bool
}

// UnmarshalText reads a CIDR, a single address, or unix:.
func (p *TrustedProxy) UnmarshalText(b []byte) error {
	s := string(b)
	if s == UnixScheme {
		*p = TrustedProxy{Unix: true}
		return nil
	}
	if strings.HasPrefix(s, UnixScheme) {
		return fmt.Errorf(`%q: write "unix:" alone: it trusts every peer of a Unix-socket listener (a Unix peer has no address to list)`, s)
	}
	pf, err := parsePrefix(s)
	if err != nil {
		return err
	}
	*p = TrustedProxy{Prefix: pf}
	return nil
}

// String returns p as written in the config.
func (p TrustedProxy) String() string {
	if p.Unix {
		return UnixScheme
	}
	return p.Prefix.String()
}

// UnixWarnings names the rules keyed by ip that count every client of a
// Unix-socket listen as one: the socket's peer has no address, and its
// X-Forwarded-For is not believed without unix: in
// client_ip.trusted_proxies. serve starts with them (and logs them);
// check-config prints them.
func (c *Config) UnixWarnings() []*rules.ParseError {
	if _, unix := UnixPath(c.Listen); !unix || c.ClientIP.Resolver().TrustUnix {
		return nil
	}
	set, err := c.RuleSet()
	if err != nil {
		return nil
	}
	var names []string
	for _, r := range set.Rules {
		for _, p := range r.Key {
			if p.Kind == rules.PartIP {
				names = append(names, r.Name)
				break
			}
		}
	}
	if len(names) == 0 {
		return nil
	}
	return []*rules.ParseError{{File: c.File, Line: c.Line("listen"), Key: "listen",
		Msg: "warning: the decision API is on a Unix socket and client_ip.trusted_proxies has no \"unix:\" entry, so the X-Forwarded-For of a gateway on the socket is not believed and " +
			"rules keyed by ip (" + strings.Join(names, ", ") + ") count every forward-auth client of the socket as one (key \"unix:\"); add \"unix:\" to trusted_proxies"}}
}

// listenClash reports whether listeners on a and b cannot both bind:
// one Unix socket path, or one TCP port (not 0) on one address, written
// alike or not (127.0.0.1 and ::ffff:127.0.0.1, 8080 and 08080,
// localhost and 127.0.0.1), or on a wildcard address (":8080", 0.0.0.0,
// ::), which takes the port on every address, IPv4 and IPv6 alike.
//
// localhost is taken as 127.0.0.1, the address serve binds for it (Go
// binds a name's first IPv4 address, and a hosts file maps localhost to
// 127.0.0.1): not ::1, which it can share a port with. Other host names
// are compared as written, in any case, and not resolved: check-config
// often runs elsewhere than serve (in CI, a build container), where a
// name may resolve to other addresses or not at all, and a reload must
// not wait on DNS; two names for one address fail at serve's bind, which
// names the address.
func listenClash(a, b string) bool {
	if sameListen(a) == sameListen(b) {
		return !zeroPort(a)
	}
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil {
		return false
	}
	na, errA := strconv.Atoi(pa)
	nb, errB := strconv.Atoi(pb)
	if errA != nil || errB != nil || na != nb || na == 0 {
		return false
	}
	ia, ipA := listenIP(ha)
	ib, ipB := listenIP(hb)
	switch {
	case ipA && ia.IsUnspecified(), ipB && ib.IsUnspecified():
		return true
	case ipA && ipB:
		return ia == ib
	}
	return strings.EqualFold(ha, hb)
}

// listenIP parses host, a listen address's host, as an IP address, IPv4
// in IPv6 unmapped; "" is the wildcard, localhost 127.0.0.1 (see
// listenClash).
func listenIP(host string) (netip.Addr, bool) {
	switch {
	case host == "":
		return netip.IPv6Unspecified(), true
	case strings.EqualFold(host, "localhost"):
		return netip.AddrFrom4([4]byte{127, 0, 0, 1}), true
	}
	ip, err := netip.ParseAddr(host)
	return ip.Unmap(), err == nil
}

// zeroPort reports whether addr is host:0, a port the system picks.
func zeroPort(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	return err == nil && port == "0"
}

// clashNote says why listeners on a and b clash when they are not
// written alike: "" when they are.
func clashNote(a, b string) string {
	if sameListen(a) == sameListen(b) {
		return ""
	}
	for _, addr := range []string{a, b} {
		host, port, err := net.SplitHostPort(addr)
		if ip, ok := listenIP(host); err == nil && ok && ip.IsUnspecified() {
			return fmt.Sprintf(" (%q listens on port %s on every address)", addr, port)
		}
	}
	for _, addr := range []string{a, b} {
		if host, _, err := net.SplitHostPort(addr); err == nil && strings.EqualFold(host, "localhost") {
			return " (the same address and port: localhost is 127.0.0.1, the address serve binds for it)"
		}
	}
	return " (the same address and port)"
}
