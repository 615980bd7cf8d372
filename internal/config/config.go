// Package config reads the daemon's YAML configuration strictly: unknown
// keys (with "did you mean"), keys given twice, values of the wrong type,
// unset environment variables and invalid values are errors that name the
// file, line and key (FILE:LINE: KEY: MSG). docs/config.md documents every
// key.
//
// # Adding a key
//
// The structs are the one list of keys: the decoder reads their
// `yaml:"name"` tags, so a field with a tag is a key, strictly typed, with
// its line recorded and misspellings suggested. Each block has its own
// file (api.go, proxy.go, grpc.go, store.go, clientip.go, defer.go; rules are
// rules.Spec in internal/rules), holding the struct, its defaults and its
// checks, so that people adding keys to different blocks touch different
// files. To add a key:
//
//  1. Add the field, with its `yaml:"name"` tag and a doc comment giving
//     its unit and default, to the block's struct. Field types the decoder
//     knows are listed in decode.go; a value such as "auto | N" is a type
//     implementing encoding.TextUnmarshaler (see rules.AutoCount).
//  2. If it has a default, set it in the block's defaults method from the
//     constant of the package that owns the behaviour (proxy, redisstore,
//     server, ...), never from a literal typed here.
//  3. Check it in the block's check method with ck.fail(KEY, ...), so the
//     error carries the key's line.
//  4. If the daemon does not act on it yet, add it to the unbuilt list in
//     unbuilt.go (and remove the entry when you build it): a key that is
//     accepted but ignored is a lie to the user.
//  5. Add it to testdata/config/ok-full.yaml (and its goldens), a bad value
//     to a testdata/config/bad-*.yaml fixture, and docs/config.md.
//     TestEveryKeyHasAFixture fails while a key is in no ok-*.yaml fixture.
//
// Keys that need a restart to change are listed by the daemon (reload.go).
package config

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/internal/yamlnode"
)

// Config is the daemon's configuration, decoded strictly by Parse, with
// defaults applied and checked by Validate.
type Config struct {
	// File is the path the config was read from ("" for a config built in
	// Go); relative paths in the config are resolved against its
	// directory.
	File string `yaml:"-"`

	// Listen is the address of the decision API, /metrics, /healthz and
	// /readyz. Default DefaultListen.
	Listen string `yaml:"listen"`
	// LogLevel is debug, info (default), warn or error.
	LogLevel string `yaml:"log_level"`
	// ShutdownTimeout bounds how long a graceful shutdown waits for
	// in-flight requests; 0 means the daemon's default.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`

	API         APIConfig         `yaml:"api"`   // the client side of Listen
	Proxy       *ProxyConfig      `yaml:"proxy"` // nil: no reverse proxy
	GRPC        *GRPCConfig       `yaml:"grpc"`  // nil: no gRPC service
	Store       StoreConfig       `yaml:"store"`
	ClientIP    ClientIPConfig    `yaml:"client_ip"`
	ForwardAuth ForwardAuthConfig `yaml:"forward_auth"`
	Limits      LimitsConfig      `yaml:"limits"`
	Defer       DeferConfig       `yaml:"defer"` // the queue of action: defer
	Rules       []rules.Spec      `yaml:"rules"`

	lines  map[string]int    // key path → line, as read by Parse
	set    *rules.Set        // the rules as validate compiled them (see RuleSet)
	digest [sha256.Size]byte // SHA-256 of the bytes Parse read
	parsed bool              // digest is set: c came from Parse
}

// Errors is every problem Parse found, in line order; each prints as
// FILE:LINE: KEY: MSG. Use errors.As to get at it.
type Errors = rules.ParseErrors

// Defaults of the keys this package owns. The defaults of the other keys
// are declared by the packages that act on them (proxy, redisstore,
// server, ...) and applied by each block's defaults method.
const (
	DefaultListen   = "127.0.0.1:8080"
	DefaultLogLevel = "info"

	// MaxConfigBytes bounds the size of a config file.
	MaxConfigBytes = 4 << 20
	// maxNodes bounds the YAML nodes that aliases add to those of the
	// file (which its size bounds) as the decoder visits them, so that a
	// small file of nested aliases cannot make it run for ever.
	maxNodes = 100_000
	// maxProblems bounds the problems reported for one file.
	maxProblems = 100
)

//go:embed example.yaml
var example []byte

// Example returns the built-in example config that `sluice serve` runs
// without -config: the decision API on 127.0.0.1:8080, the memory store,
// and demo rules (a per-IP limit of 5/m, a per-API-key limit). It passes
// Parse. The caller may modify the returned slice.
func Example() []byte { return bytes.Clone(example) }

// Line returns the line of the key path key ("store.redis.db",
// "rules[2].sync") in the file c was parsed from, or of its nearest
// enclosing key that was written, or 0 (a Config built in Go). Use it to
// name lines in errors found after Parse.
func (c *Config) Line(key string) int {
	l, _ := lineIn(c.lines, c.Rules, key)
	return l
}

// Has reports whether the key path key was written in the file c was
// parsed from (false for a Config built in Go).
func (c *Config) Has(key string) bool {
	_, ok := lineIn(c.lines, c.Rules, key)
	return ok
}

// Digest returns the SHA-256 of the content c was parsed from, and false
// for a Config built in Go. The daemon compares it with the file's content
// to tell whether the file changed since it was read.
func (c *Config) Digest() ([sha256.Size]byte, bool) { return c.digest, c.parsed }

// Load reads and parses the config file at path (see Parse).
func Load(path string) (*Config, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// ReadFile reads the config file at path, at most MaxConfigBytes and one
// byte more (so that Parse reports a larger file as such), so that a huge
// file or a device never fills memory. Load and every reload use it. The
// error, if any, is Errors.
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, Errors{{File: path, Msg: fmt.Sprintf("cannot read config: %v", errors.Unwrap(err))}}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxConfigBytes+1))
	if err != nil {
		return nil, Errors{{File: path, Msg: fmt.Sprintf("cannot read config: %v", err)}}
	}
	return data, nil
}

// Parse parses data, the contents of the config file named file,
// strictly: unknown keys, keys given twice, values of the wrong type,
// unset environment variables and invalid values are errors. It then
// applies the defaults and validates the result, compiling the rules.
//
// String values may use ${VAR} (an environment variable, which must be set)
// and ${VAR:-default} (the default when VAR is unset or empty); $${ writes a
// literal ${. Numbers, booleans and durations given as a string are
// expanded the same way, then parsed.
//
// The error, if any, is Errors, listing every problem found.
func Parse(file string, data []byte) (*Config, error) {
	d := newDecoder(file)
	c := &Config{File: file}
	if len(data) > MaxConfigBytes {
		return nil, Errors{{File: file, Msg: fmt.Sprintf("config is larger than %d bytes", MaxConfigBytes)}}
	}
	root, err := parseYAML(file, data)
	if err != nil {
		return nil, err
	}
	d.Own(root)
	if d.config(root, c) {
		// Validate what decoded, leaving out problems of keys that did not
		// decode (a rate of the wrong type is not also "missing").
		d.explicitZeros(c)
		c.applyDefaults()
		var ves rules.ParseErrors
		if err := c.validate(d.lines, d.expanded); errors.As(err, &ves) {
			failed := failedKeys(d.Errs)
			for _, e := range ves {
				if !failed.related(e.Key) {
					d.Errs = append(d.Errs, e)
				}
			}
		}
	}
	c.lines = d.lines
	c.digest, c.parsed = sha256.Sum256(data), true
	if len(d.Errs) > 0 {
		d.Errs.Sort()
		if len(d.Errs) > maxProblems {
			n := len(d.Errs) - maxProblems
			d.Errs = append(d.Errs[:maxProblems], &rules.ParseError{File: file, Msg: fmt.Sprintf("%d more problems not shown", n)})
		}
		return nil, d.Errs
	}
	return c, nil
}

// config decodes the top level. It reports false when there is nothing
// worth validating (the top is not a mapping, or the node budget ran out).
func (d *decoder) config(root *yaml.Node, c *Config) bool {
	r := d.Resolve("", root)
	if r == nil {
		d.Fail(&yaml.Node{Line: 1}, "", "empty config: want a mapping such as listen: 127.0.0.1:8080")
		return false
	}
	if r.Kind != yaml.MappingNode {
		d.Fail(r, "", "want a mapping of keys (listen, proxy, store, rules, …) at the top, not %s", yamlnode.KindName(r))
		return false
	}
	d.structure("", root, reflect.ValueOf(c).Elem())
	return !d.Spent()
}

// applyDefaults fills in every value left zero, block by block.
func (c *Config) applyDefaults() {
	setDefault(&c.Listen, DefaultListen)
	setDefault(&c.LogLevel, DefaultLogLevel)
	c.API.defaults(c.File)
	if c.Proxy != nil {
		c.Proxy.defaults(c.File)
	}
	if c.GRPC != nil {
		c.GRPC.defaults(c.File)
	}
	c.Store.defaults(c.File)
	c.ClientIP.defaults()
	c.ForwardAuth.defaults()
	c.Limits.defaults()
	c.Defer.defaults()
}

// Validate checks c, which must have its defaults applied (Parse does
// both), and compiles its rules, keeping them for RuleSet. The error, if
// any, is Errors; on a Config built in Go rather than read from a file its
// lines are 0.
func (c *Config) Validate() error { return c.validate(nil, nil) }

// RuleSet returns c's rules compiled. When c's rules and client_ip
// prefixes are as they were when Validate (or Parse) last compiled them,
// it returns that Set rather than compile them again; a change made in Go
// since is compiled. It does not change c: calls may run concurrently,
// though not with Validate.
func (c *Config) RuleSet() (*rules.Set, error) {
	o := rules.Options{IP: c.ClientIP.Prefixes()}
	if c.set.CompiledFrom(c.Rules, o) {
		return c.set, nil
	}
	return rules.CompileWith(c.File, c.Rules, o)
}

func (c *Config) validate(lines map[string]int, expanded map[string]string) error {
	ck := &checker{file: c.File, lines: lines, rules: c.Rules, expanded: expanded}
	ck.listen("listen", c.Listen, true)
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		ck.fail("log_level", "unknown level %q (want debug, info, warn or error)", c.LogLevel)
	}
	if c.ShutdownTimeout != 0 {
		ck.between("shutdown_timeout", c.ShutdownTimeout, time.Millisecond, 10*time.Minute)
	}
	c.API.check(ck, "api")
	if c.Proxy != nil {
		c.Proxy.check(ck)
	}
	if c.GRPC != nil {
		c.GRPC.check(ck)
	}
	c.Store.check(ck)
	c.ClientIP.check(ck)
	c.ForwardAuth.check(ck)
	c.Limits.check(ck)
	c.Defer.check(ck)
	c.checkRules(ck)
	return ck.errs.Err()
}

// checker collects the problems of validation, each with its key's line.
type checker struct {
	file      string
	lines     map[string]int
	rules     []rules.Spec      // their Lines hold the lines of the keys below them
	expanded  map[string]string // key path → its text, when it took an environment variable
	errs      rules.ParseErrors
	listeners []listenAt // those met so far, to refuse two that cannot both bind
}

func (ck *checker) fail(key, format string, args ...any) {
	ck.errs = append(ck.errs, &rules.ParseError{File: ck.file, Line: ck.line(key), Key: key, Msg: fmt.Sprintf(format, args...)})
}

// addr checks a host:port listen or dial address.
func (ck *checker) addr(key, addr string) {
	if msg := addrProblem(addr); msg != "" {
		ck.fail(key, "%q: %s", redact(addr), msg)
	}
}

// listen checks a listen address, a Unix socket's (unix:/PATH) too with
// unixOK, and that no other listener has it.
func (ck *checker) listen(key, addr string, unixOK bool) {
	if msg := listenProblem(addr, unixOK); msg != "" {
		ck.fail(key, "%q: %s", redact(addr), msg)
	}
	for _, l := range ck.listeners {
		if listenClash(l.addr, addr) {
			ck.fail(key, "%q is already used by %s%s", redact(addr), l.key, clashNote(l.addr, addr))
			break
		}
	}
	ck.listeners = append(ck.listeners, listenAt{key, addr})
}

// listenAt is a listen address and its key, as checker.listen met it.
type listenAt struct{ key, addr string }

// between checks lo ≤ x ≤ hi.
func (ck *checker) between(key string, x, lo, hi time.Duration) {
	if x < lo || x > hi {
		ck.fail(key, "%v must be between %v and %v", x, lo, hi)
	}
}

// regular checks that path names a regular file.
func (ck *checker) regular(key, path string) { ck.path(key, path, false) }

// secretFile checks, as regular, that path names a regular file, path
// naming a secret (a token, a private key). When it came from the
// environment and names nothing, the variable may hold the secret itself
// rather than a path, so the problem names the text written in the
// config (${API_TOKEN}) instead: check-config prints it and every refused
// reload logs it.
func (ck *checker) secretFile(key, path, what string) {
	if text, ok := ck.expanded[key]; ok {
		if _, err := os.Stat(path); err != nil {
			ck.fail(key, "%s: %v (the path it expands to is not shown: the variable may hold %s itself, where the path of a file holding it goes)", text, errors.Unwrap(err), what)
			return
		}
	}
	ck.regular(key, path)
}

// path checks that path names a regular file or, with dirOK, a directory.
func (ck *checker) path(key, path string, dirOK bool) {
	if path == "" {
		ck.fail(key, "empty path")
	} else if fi, err := os.Stat(path); err != nil {
		ck.fail(key, "%s: %v", path, errors.Unwrap(err))
	} else if !fi.Mode().IsRegular() && !(dirOK && fi.IsDir()) {
		ck.fail(key, "%s is not a regular file", path)
	}
}

// addrProblem returns what is wrong with a host:port listen or dial
// address, or "".
func addrProblem(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "want host:port, such as 127.0.0.1:8080 or :8080"
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return "port " + strconv.Quote(port) + " is not a number from 0 to 65535"
	}
	if strings.ContainsAny(host, " \t/?#@") {
		return "host " + strconv.Quote(host) + " is not a host name or address"
	}
	return ""
}

func setDefault[T comparable](x *T, v T) {
	var zero T
	if *x == zero {
		*x = v
	}
}

// explicitZeros refuses a 0 written for a key whose default is not 0 and
// for which 0 does not mean "none": left as it is, applyDefaults would
// quietly turn max_connections: 0 ("no cap"?) into 10000, or
// response_header_timeout: 0s ("no timeout", as in net/http) into 60s.
// Every such key is listed here, and the strings whose default is not
// empty: store.on_error: "" would quietly fail open.
func (d *decoder) explicitZeros(c *Config) {
	failed := failedKeys(d.Errs)
	zero := func(key string, v int64, what string) {
		// A value that did not decode stays 0: its problem is told.
		if l, ok := d.lines[key]; ok && v == 0 && !failed.related(key) {
			d.Errs = append(d.Errs, &rules.ParseError{File: d.File, Line: l, Key: key,
				Msg: "0 is not allowed: " + what + " (leave the key out for the default)"})
			failed.add(key)
		}
	}
	listener := func(block string, l *Listener) {
		zero(block+".body_read_timeout", int64(l.BodyReadTimeout), "a request body must be bounded; give the longest wait between two reads, such as 30s")
		zero(block+".max_connections", int64(l.MaxConnections), "the connections held must be bounded; give a cap such as 10000")
		zero(block+".read_header_timeout", int64(l.ReadHeaderTimeout), "reading a request's headers must be bounded; give a time such as 10s")
		zero(block+".idle_timeout", int64(l.IdleTimeout), "idle connections must be closed; give a time such as 120s")
		zero(block+".send_timeout", int64(l.SendTimeout), "a client that stops reading must be cut; give the longest wait between two writes, such as 60s")
	}
	listener("api", &c.API.Listener)
	if c.Proxy != nil {
		listener("proxy", &c.Proxy.Listener)
		zero("proxy.dial_timeout", int64(c.Proxy.DialTimeout), "connecting to the upstream must be bounded; give a time such as 5s")
		zero("proxy.response_header_timeout", int64(c.Proxy.ResponseHeaderTimeout), "the wait for the upstream's answer must be bounded; give a time such as 60s")
		zero("proxy.tunnel_idle_timeout", int64(c.Proxy.TunnelIdleTimeout), "an idle WebSocket or other upgraded connection must be closed; give a time such as 1h")
	}
	zero("store.expected_instances", int64(c.Store.ExpectedInstances), "give the number of instances sharing the store, such as 1")
	zero("store.redis.timeout", int64(c.Store.Redis.Timeout), "a Redis call must be bounded; give a time such as 50ms")
	zero("forward_auth.deny_status", int64(c.ForwardAuth.DenyStatus), "give the status of a limited answer, such as 429 (403 for nginx)")
	zero("limits.max_body_bytes", c.Limits.MaxBodyBytes, "a request body must be bounded; give a size such as 65536")
	if c.GRPC != nil {
		zero("grpc.max_connections", int64(c.GRPC.MaxConnections), "the connections held must be bounded; give a cap such as 10000")
	}
	zero("client_ip.ipv6_prefix", int64(c.ClientIP.IPv6Prefix), "an ip key counts 1 to 128 bits of an IPv6 address (64: its /64)")
	zero("client_ip.ipv4_prefix", int64(c.ClientIP.IPv4Prefix), "an ip key counts 1 to 32 bits of an IPv4 address (32: the address)")
	empty := func(key, v, what string) {
		if l, ok := d.lines[key]; ok && v == "" && !failed.related(key) {
			d.Errs = append(d.Errs, &rules.ParseError{File: d.File, Line: l, Key: key,
				Msg: "empty is not allowed: " + what + " (leave the key out for the default)"})
			failed.add(key)
		}
	}
	// As ${VAR} gives for a variable set but empty: on_error would
	// quietly fail open.
	empty("listen", c.Listen, "give an address such as 127.0.0.1:8080")
	empty("log_level", c.LogLevel, "give debug, info, warn or error")
	empty("store.on_error", c.Store.OnError, "give allow, deny or local")
	empty("store.redis.key_prefix", c.Store.Redis.KeyPrefix, `give a prefix such as "sluice:" that keeps sluice's keys apart from others in the same Redis`)
	zero("defer.claim_idle", int64(c.Defer.ClaimIdle), "a dead instance's requests must be taken over; give a wait such as 30s")
	zero("defer.delivery_timeout", int64(c.Defer.DeliveryTimeout), "a replay must be bounded; give a timeout such as 10s")
	zero("defer.max_attempts", int64(c.Defer.MaxAttempts), "a request is sent at least once; give a count such as 5")
	zero("defer.backoff", int64(c.Defer.Backoff), "give the first wait after a failure, such as 1s")
	zero("defer.max_backoff", int64(c.Defer.MaxBackoff), "give the longest wait between attempts, such as 1m")
	zero("defer.concurrency", int64(c.Defer.Concurrency), "replays need at least one in flight; give a bound such as 16")
	zero("defer.status_ttl", int64(c.Defer.StatusTTL), "an outcome must stay readable for a while; give a time such as 24h")
	zero("shutdown_timeout", int64(c.ShutdownTimeout), "a shutdown must be bounded; give a time such as 10s")
	for i := range c.Rules {
		sp := &c.Rules[i]
		rule := "rules[" + strconv.Itoa(i) + "]."
		// Their lines are the rule's (see lineIn).
		zero := func(key string, v int64, what string) {
			if l, ok := sp.Lines[strings.TrimPrefix(key, rule)]; ok && v == 0 && !failed.related(key) {
				d.Errs = append(d.Errs, &rules.ParseError{File: d.File, Line: l, Key: key,
					Msg: "0 is not allowed: " + what + " (leave the key out for the default)"})
				failed.add(key)
			}
		}
		zero(rule+"burst", sp.Burst, "a burst of 0 admits nothing; give the requests admitted at once, such as the rate")
		zero(rule+"segments", int64(sp.Segments), "a window is counted in 1 to 1024 segments")
		if sp.Action == "delay" {
			zero(rule+"max_delay", int64(sp.MaxDelay), "a delay rule holds a request for a slot up to max_delay; give a time such as 1s, or use action: reject to hold none")
		}
		// Off when left out, but out of their ranges, as shards: 1 is.
		zero(rule+"sync", int64(sp.Sync), "a soft limit reconciles every 1ms to 1m")
		if sp.Lease.IsZero() {
			zero(rule+"lease", 0, "a lease reserves 1 or more at a time, or auto")
		}
		if sp.Shards.IsZero() {
			zero(rule+"shards", 0, "a key's counter is split over 2 to 1024 Redis keys, or auto")
		}
		if sp.Defer != nil {
			zero(rule+"defer.max_queue", int64(sp.Defer.MaxQueue), "give the requests the rule may queue, such as 10000")
			zero(rule+"defer.max_body_bytes", sp.Defer.MaxBodyBytes, "give the largest body queued, such as 1048576")
		}
	}
}
