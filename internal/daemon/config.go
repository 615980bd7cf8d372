package daemon

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/rules"
)

// Config is the daemon's configuration: the YAML of SPEC §4, decoded
// strictly by ParseConfig, with defaults applied and checked by Validate.
// docs/config.md documents every key.
//
// Parsed and validated but not yet enforced by the daemon: GRPC (Envoy rate
// limit service), rules' Sync and Shards, store.on_error "local" with
// ExpectedInstances, action "defer", and the hot keys listing.
type Config struct {
	// File is the path the config was read from ("" for the built-in
	// example); relative paths in the config are resolved against its
	// directory.
	File string

	// Listen is the address of the decision API, /metrics, /healthz and
	// /readyz. Default "127.0.0.1:8080".
	Listen string
	// LogLevel is debug, info (default), warn or error.
	LogLevel string
	// ShutdownTimeout bounds how long a graceful shutdown waits for
	// in-flight requests; 0 means DefaultShutdownTimeout (10s, declared
	// with the daemon).
	ShutdownTimeout time.Duration

	Proxy       *ProxyConfig // nil: no reverse proxy
	GRPC        *GRPCConfig  // nil: no gRPC service (not yet enforced)
	Store       StoreConfig
	ClientIP    ClientIPConfig
	ForwardAuth ForwardAuthConfig
	Limits      LimitsConfig
	Rules       []rules.Spec

	lines map[string]int // key path → line, as read by ParseConfig
}

// Line returns the line of the key path key ("store.redis.db",
// "rules[2].sync") in the file c was parsed from, or of its nearest
// enclosing key that was written, or 0 (a Config built in Go). Use it to
// name lines in errors found after ParseConfig.
func (c *Config) Line(key string) int { return lineOf(c.lines, key) }

// ProxyConfig is the reverse proxy: requests to Listen go to Upstream.
type ProxyConfig struct {
	Listen   string // required, host:port
	Upstream string // required, an absolute http or https URL
	// DialTimeout bounds connecting to the upstream. Default 5s.
	DialTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for the upstream's response
	// headers once the request is sent. Default 60s; the body streams
	// without a deadline.
	ResponseHeaderTimeout time.Duration
	// ReadHeaderTimeout bounds reading a client's request headers.
	// Default 10s.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes idle client keep-alive connections. Default 120s.
	IdleTimeout time.Duration
}

// GRPCConfig is the Envoy rate limit service (SPEC §6). Not yet enforced.
type GRPCConfig struct {
	Listen string   // required, host:port
	Config []string // Envoy-format descriptor files, resolved against the config's directory
}

// StoreConfig selects where counters live.
type StoreConfig struct {
	Type  string // "memory" (default) or "redis"
	Redis RedisConfig
	// OnError is what happens when the store cannot decide: "allow"
	// (default, fail open), "deny" (fail closed, 503) or "local" (an
	// in-memory limit of rate/ExpectedInstances; not yet enforced).
	OnError string
	// ExpectedInstances is how many daemons share the Redis store; used by
	// on_error: local. Default 1.
	ExpectedInstances int
	// MaxKeys caps the keys the memory store holds; 0 means the memstore
	// default.
	MaxKeys int
}

// RedisConfig is the Redis (or Redis Cluster) store.
type RedisConfig struct {
	Addrs    []string      // host:port; required for type redis; several need Cluster
	Cluster  bool          // Redis Cluster
	Timeout  time.Duration // per operation; default 50ms
	Username string
	Password string // use ${ENV} rather than writing it in the file
	DB       int    // database number; must be 0 with Cluster
	TLS      bool
	// KeyPrefix is prepended to every key. Default "sluice:".
	KeyPrefix string
}

// ClientIPConfig says whose forwarding headers to believe.
type ClientIPConfig struct {
	// TrustedProxies are the CIDRs (or single addresses) of proxies whose
	// X-Forwarded-For / Forwarded headers are read. Empty: nobody's.
	TrustedProxies []netip.Prefix
}

// ForwardAuthConfig is the /v1/forward-auth endpoint.
type ForwardAuthConfig struct {
	// DenyStatus is the status of a limited answer, 400–599. Default 429
	// (use 403 for nginx auth_request, which treats 429 as an error).
	DenyStatus int
}

// LimitsConfig bounds what the daemon accepts.
type LimitsConfig struct {
	// MaxBodyBytes bounds a decision API request body. Default 65536.
	MaxBodyBytes int64
}

// ConfigErrors is every problem ParseConfig found, in line order; each
// prints as FILE:LINE: KEY: MSG. Use errors.As to get at it.
type ConfigErrors = rules.ParseErrors

// Defaults of the config file (docs/config.md).
const (
	DefaultListen                = "127.0.0.1:8080"
	DefaultLogLevel              = "info"
	DefaultDialTimeout           = 5 * time.Second
	DefaultResponseHeaderTimeout = 60 * time.Second
	DefaultReadHeaderTimeout     = 10 * time.Second
	DefaultIdleTimeout           = 120 * time.Second
	DefaultRedisTimeout          = 50 * time.Millisecond
	DefaultRedisKeyPrefix        = "sluice:"
	DefaultOnError               = "allow"
	DefaultDenyStatus            = 429
	DefaultMaxBodyBytes          = 64 << 10

	// MaxConfigBytes bounds the size of a config file.
	MaxConfigBytes = 4 << 20
	// maxNodes bounds the YAML nodes visited, aliases expanded, so that a
	// small file of nested aliases cannot make the decoder run for ever.
	maxNodes = 100_000
	// maxProblems bounds the problems reported for one file.
	maxProblems = 100
)

//go:embed example.yaml
var exampleConfig []byte

// ExampleConfig returns the built-in example config that `sluice serve`
// runs without -config: the decision API on 127.0.0.1:8080, the memory
// store, and demo rules (a per-IP limit of 5/m, a per-API-key limit). It
// passes ParseConfig. The caller may modify the returned slice.
func ExampleConfig() []byte { return bytes.Clone(exampleConfig) }

// LoadConfig reads and parses the config file at path (see ParseConfig).
func LoadConfig(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, ConfigErrors{{File: path, Msg: fmt.Sprintf("cannot read config: %v", errors.Unwrap(err))}}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxConfigBytes+1))
	if err != nil {
		return nil, ConfigErrors{{File: path, Msg: fmt.Sprintf("cannot read config: %v", err)}}
	}
	return ParseConfig(path, data)
}

// ParseConfig parses data, the contents of the config file named file,
// strictly: unknown keys, keys given twice, values of the wrong type,
// unset environment variables and invalid values are errors. It then
// applies the defaults and validates the result, compiling the rules.
//
// String values may use ${VAR} (an environment variable, which must be set)
// and ${VAR:-default} (the default when VAR is unset or empty); $${ writes a
// literal ${. Numbers, booleans and durations given as a string are
// expanded the same way, then parsed.
//
// The error, if any, is ConfigErrors, listing every problem found.
func ParseConfig(file string, data []byte) (*Config, error) {
	d := &decoder{file: file, lookup: os.LookupEnv, lines: map[string]int{}, budget: maxNodes}
	c := &Config{File: file}
	if len(data) > MaxConfigBytes {
		return nil, ConfigErrors{{File: file, Msg: fmt.Sprintf("config is larger than %d bytes", MaxConfigBytes)}}
	}
	root, err := parseYAML(file, data)
	if err != nil {
		return nil, err
	}
	if d.config(root, c) {
		// Validate what decoded, leaving out problems of keys that did not
		// decode (a rate of the wrong type is not also "missing").
		c.applyDefaults()
		var ves rules.ParseErrors
		if err := c.validate(d.lines); errors.As(err, &ves) {
			decodeErrs := d.errs
			for _, e := range ves {
				if !related(decodeErrs, e.Key) {
					d.errs = append(d.errs, e)
				}
			}
		}
	}
	c.lines = d.lines
	if len(d.errs) > 0 {
		d.errs.Sort()
		if len(d.errs) > maxProblems {
			n := len(d.errs) - maxProblems
			d.errs = append(d.errs[:maxProblems], &rules.ParseError{File: file, Msg: fmt.Sprintf("%d more problems not shown", n)})
		}
		return nil, d.errs
	}
	return c, nil
}

// related reports whether key is, contains or is contained in a key that
// failed to decode.
func related(errs rules.ParseErrors, key string) bool {
	for _, e := range errs {
		b := e.Key
		if key == b || under(key, b) || under(b, key) {
			return true
		}
	}
	return false
}

// under reports whether key lies below parent ("a.b" and "a[1]" lie below "a").
func under(key, parent string) bool {
	return len(key) > len(parent) && strings.HasPrefix(key, parent) && (key[len(parent)] == '.' || key[len(parent)] == '[')
}

// parseYAML reads the single document of data.
func parseYAML(file string, data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, ConfigErrors{{File: file, Line: 1, Msg: "empty config: want a mapping such as listen: 127.0.0.1:8080"}}
		}
		return nil, ConfigErrors{yamlError(file, err)}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, ConfigErrors{{File: file, Line: extra.Line, Msg: "more than one YAML document (---): a config is one document"}}
	} else if !errors.Is(err, io.EOF) {
		return nil, ConfigErrors{yamlError(file, err)}
	}
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		return doc.Content[0], nil
	}
	return &doc, nil
}

var yamlLine = regexp.MustCompile(`^yaml: (?:line (\d+): )?(.*)$`)

// yamlError turns a YAML syntax error into a ParseError with its line.
func yamlError(file string, err error) *rules.ParseError {
	msg := err.Error()
	line := 0
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	return &rules.ParseError{File: file, Line: line, Msg: "YAML syntax: " + msg}
}

// decoder walks the YAML nodes into a Config, collecting every problem.
type decoder struct {
	file   string
	lookup func(string) (string, bool)
	errs   rules.ParseErrors
	lines  map[string]int // key path → line of its value
	budget int
}

func (d *decoder) fail(n *yaml.Node, key, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	d.errs = append(d.errs, &rules.ParseError{File: d.file, Line: line, Key: key, Msg: fmt.Sprintf(format, args...)})
}

// resolve follows aliases and charges the node budget. It returns nil for
// a null value (so that "key:" with nothing means "not given") and when
// the budget is spent.
func (d *decoder) resolve(key string, n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n == nil {
		return nil
	}
	d.budget--
	if d.budget == 0 {
		d.fail(n, key, "config too large: more than %d values (aliases expanded)", maxNodes)
	}
	if d.budget <= 0 {
		return nil
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	return n
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// fields maps the keys of one mapping to their decoders.
type fields map[string]func(key string, v *yaml.Node)

// mapping decodes the mapping n, key by key. It records the line of every
// key in d.lines and reports unknown and repeated keys.
func (d *decoder) mapping(key string, n *yaml.Node, fs fields) {
	if n = d.resolve(key, n); n == nil {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.fail(n, key, "want a mapping of keys (%s), not %s", strings.Join(sortedKeys(fs), ", "), kindName(n))
		return
	}
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.AliasNode && k.Alias != nil {
			k = k.Alias
		}
		if k.Kind != yaml.ScalarNode {
			d.fail(k, key, "a key must be a plain name, not %s", kindName(k))
			continue
		}
		name := k.Value
		path := join(key, name)
		if name == "<<" {
			d.fail(k, key, "merge keys (<<) are not supported; write the keys out")
			continue
		}
		if seen[name] {
			d.fail(k, path, "key given twice")
			continue
		}
		seen[name] = true
		f := fs[name]
		if f == nil {
			msg := "unknown key"
			if s := suggest(name, fs); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			} else {
				msg += fmt.Sprintf(" (want one of %s)", strings.Join(sortedKeys(fs), ", "))
			}
			d.fail(k, path, "%s", msg)
			continue
		}
		d.lines[path] = k.Line
		f(path, v)
	}
}

// sequence calls each for every item of the sequence n.
func (d *decoder) sequence(key string, n *yaml.Node, each func(key string, i int, v *yaml.Node)) {
	if n = d.resolve(key, n); n == nil {
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.fail(n, key, "want a list such as [a, b], not %s", kindName(n))
		return
	}
	for i, v := range n.Content {
		k := key + "[" + strconv.Itoa(i) + "]"
		d.lines[k] = v.Line
		each(k, i, v)
	}
}

// scalar returns the text of a scalar value with ${VAR} expanded, or false
// (after reporting) when it is not a scalar or expansion fails. want names
// the expected type in messages.
func (d *decoder) scalar(key string, n *yaml.Node, want string) (string, *yaml.Node, bool) {
	if n = d.resolve(key, n); n == nil {
		return "", nil, false
	}
	if n.Kind != yaml.ScalarNode {
		d.fail(n, key, "want %s, not %s", want, kindName(n))
		return "", nil, false
	}
	s, ok := d.expand(key, n)
	return s, n, ok
}

func (d *decoder) str(dst *string) func(string, *yaml.Node) {
	return func(key string, v *yaml.Node) {
		s, n, ok := d.scalar(key, v, "a string")
		if !ok {
			return
		}
		switch n.Tag {
		case "!!str", "!!int", "!!float":
			*dst = s
		default:
			d.fail(n, key, "want a string, not %s", kindName(n))
		}
	}
}

func (d *decoder) int64(dst *int64) func(string, *yaml.Node) {
	return func(key string, v *yaml.Node) {
		s, n, ok := d.scalar(key, v, "a whole number")
		if !ok {
			return
		}
		if n.Tag != "!!int" && !(n.Tag == "!!str" && strings.Contains(n.Value, "${")) {
			d.fail(n, key, "want a whole number, not %s", kindName(n))
			return
		}
		x, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 0, 64)
		if err != nil {
			d.fail(n, key, "%q is not a whole number in range", s)
			return
		}
		*dst = x
	}
}

func (d *decoder) int(dst *int) func(string, *yaml.Node) {
	return func(key string, v *yaml.Node) {
		var x int64
		d.int64(&x)(key, v)
		if x < math.MinInt32 || x > math.MaxInt32 {
			d.fail(v, key, "%d is out of range", x)
			return
		}
		*dst = int(x)
	}
}

func (d *decoder) bool(dst *bool) func(string, *yaml.Node) {
	return func(key string, v *yaml.Node) {
		s, n, ok := d.scalar(key, v, "true or false")
		if !ok {
			return
		}
		if n.Tag != "!!bool" && !(n.Tag == "!!str" && strings.Contains(n.Value, "${")) {
			d.fail(n, key, "want true or false, not %s", kindName(n))
			return
		}
		b, err := strconv.ParseBool(s)
		if err != nil {
			d.fail(n, key, "want true or false, not %q", s)
			return
		}
		*dst = b
	}
}

func (d *decoder) duration(dst *time.Duration) func(string, *yaml.Node) {
	return func(key string, v *yaml.Node) {
		s, n, ok := d.scalar(key, v, "a duration such as 50ms")
		if !ok {
			return
		}
		if n.Tag != "!!str" {
			d.fail(n, key, "want a duration with a unit, such as 50ms or 2s, not %s", kindName(n))
			return
		}
		x, err := time.ParseDuration(s)
		if err != nil {
			d.fail(n, key, "%q is not a duration (want a number and a unit, such as 50ms, 2s or 1m30s)", s)
			return
		}
		if x < 0 {
			d.fail(n, key, "%v must not be negative", x)
			return
		}
		*dst = x
	}
}

func (d *decoder) strings(dst *[]string) func(string, *yaml.Node) {
	return func(key string, v *yaml.Node) {
		out := []string{}
		d.sequence(key, v, func(k string, _ int, item *yaml.Node) {
			var s string
			d.str(&s)(k, item)
			out = append(out, s)
		})
		*dst = out
	}
}

// expand replaces ${VAR}, ${VAR:-default} and $${ in a scalar's text.
func (d *decoder) expand(key string, n *yaml.Node) (string, bool) {
	s := n.Value
	if !strings.Contains(s, "${") {
		return s, true
	}
	var b strings.Builder
	ok := true
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			break
		}
		if i > 0 && s[i-1] == '$' { // $${ is a literal ${
			b.WriteString(s[:i-1])
			b.WriteString("${")
			s = s[i+2:]
			continue
		}
		b.WriteString(s[:i])
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			d.fail(n, key, "unterminated ${ in %q (write $${ for a literal ${)", n.Value)
			return "", false
		}
		inner := s[i+2 : i+end]
		s = s[i+end+1:]
		name, def, hasDef := strings.Cut(inner, ":-")
		if !validEnvName(name) {
			d.fail(n, key, "${%s}: %q is not an environment variable name", inner, name)
			ok = false
			continue
		}
		val, set := d.lookup(name)
		switch {
		case hasDef && val == "":
			val = def
		case !set:
			d.fail(n, key, "environment variable %s is not set (use ${%s:-default} for a default)", name, name)
			ok = false
			continue
		}
		b.WriteString(val)
	}
	return b.String(), ok
}

func validEnvName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return s != ""
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!str":
			return fmt.Sprintf("the string %q", n.Value)
		case "!!int":
			return "the number " + n.Value
		case "!!float":
			return "the number " + n.Value
		case "!!bool":
			return "the boolean " + n.Value
		}
		return fmt.Sprintf("%s %q", n.Tag, n.Value)
	}
	return "an alias"
}

func sortedKeys(fs fields) []string {
	ks := make([]string, 0, len(fs))
	for k := range fs {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// suggest returns the known key closest to name, if it is close.
func suggest(name string, fs fields) string {
	best, bestD := "", 3
	for _, k := range sortedKeys(fs) {
		if dd := editDistance(strings.ToLower(name), k); dd < bestD {
			best, bestD = k, dd
		}
	}
	return best
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// config decodes the top level. It reports false when there is nothing
// worth validating (the top is not a mapping, or the node budget ran out).
func (d *decoder) config(root *yaml.Node, c *Config) bool {
	r := d.resolve("", root)
	if r == nil {
		d.fail(&yaml.Node{Line: 1}, "", "empty config: want a mapping such as listen: 127.0.0.1:8080")
		return false
	}
	if r.Kind != yaml.MappingNode {
		d.fail(r, "", "want a mapping of keys (listen, proxy, store, rules, …) at the top, not %s", kindName(r))
		return false
	}
	d.mapping("", root, fields{
		"listen":           d.str(&c.Listen),
		"log_level":        d.str(&c.LogLevel),
		"shutdown_timeout": d.duration(&c.ShutdownTimeout),
		"proxy": func(key string, v *yaml.Node) {
			if d.resolve(key, v) == nil {
				return
			}
			p := &ProxyConfig{}
			c.Proxy = p
			d.mapping(key, v, fields{
				"listen":                  d.str(&p.Listen),
				"upstream":                d.str(&p.Upstream),
				"dial_timeout":            d.duration(&p.DialTimeout),
				"response_header_timeout": d.duration(&p.ResponseHeaderTimeout),
				"read_header_timeout":     d.duration(&p.ReadHeaderTimeout),
				"idle_timeout":            d.duration(&p.IdleTimeout),
			})
		},
		"grpc": func(key string, v *yaml.Node) {
			if d.resolve(key, v) == nil {
				return
			}
			g := &GRPCConfig{}
			c.GRPC = g
			d.mapping(key, v, fields{
				"listen": d.str(&g.Listen),
				"config": d.strings(&g.Config),
			})
		},
		"store": func(key string, v *yaml.Node) {
			s := &c.Store
			d.mapping(key, v, fields{
				"type": d.str(&s.Type),
				"redis": func(key string, v *yaml.Node) {
					r := &s.Redis
					d.mapping(key, v, fields{
						"addrs":      d.strings(&r.Addrs),
						"cluster":    d.bool(&r.Cluster),
						"timeout":    d.duration(&r.Timeout),
						"username":   d.str(&r.Username),
						"password":   d.str(&r.Password),
						"db":         d.int(&r.DB),
						"tls":        d.bool(&r.TLS),
						"key_prefix": d.str(&r.KeyPrefix),
					})
				},
				"on_error":           d.str(&s.OnError),
				"expected_instances": d.int(&s.ExpectedInstances),
				"max_keys":           d.int(&s.MaxKeys),
			})
		},
		"client_ip": func(key string, v *yaml.Node) {
			d.mapping(key, v, fields{
				"trusted_proxies": func(key string, v *yaml.Node) {
					d.sequence(key, v, func(k string, _ int, item *yaml.Node) {
						var s string
						d.str(&s)(k, item)
						if s == "" {
							return
						}
						p, err := parsePrefix(s)
						if err != nil {
							d.fail(item, k, "%v", err)
							return
						}
						c.ClientIP.TrustedProxies = append(c.ClientIP.TrustedProxies, p)
					})
				},
			})
		},
		"forward_auth": func(key string, v *yaml.Node) {
			d.mapping(key, v, fields{"deny_status": d.int(&c.ForwardAuth.DenyStatus)})
		},
		"limits": func(key string, v *yaml.Node) {
			d.mapping(key, v, fields{"max_body_bytes": d.int64(&c.Limits.MaxBodyBytes)})
		},
		"rules": func(key string, v *yaml.Node) {
			c.Rules = []rules.Spec{}
			d.sequence(key, v, func(k string, _ int, item *yaml.Node) {
				c.Rules = append(c.Rules, d.rule(k, item))
			})
		},
	})
	return d.budget > 0
}

// rule decodes one rule; its Lines are keyed relative to the rule.
func (d *decoder) rule(key string, n *yaml.Node) rules.Spec {
	sp := rules.Spec{Lines: map[string]int{}}
	outer := d.lines
	d.lines = map[string]int{}
	if r := d.resolve(key, n); r != nil {
		sp.Line = r.Line
	}
	d.mapping(key, n, fields{
		"name": d.str(&sp.Name),
		"match": func(k string, v *yaml.Node) {
			d.mapping(k, v, fields{
				"methods": d.strings(&sp.Match.Methods),
				"path":    d.str(&sp.Match.Path),
			})
		},
		"key":       d.strings(&sp.Key),
		"rate":      d.str(&sp.Rate),
		"burst":     d.int64(&sp.Burst),
		"segments":  d.int(&sp.Segments),
		"algorithm": d.str(&sp.Algorithm),
		"action":    d.str(&sp.Action),
		"max_delay": d.duration(&sp.MaxDelay),
		"sync":      d.duration(&sp.Sync),
		"shards":    d.int(&sp.Shards),
	})
	prefix := key + "."
	for k, l := range d.lines {
		outer[k] = l
		if rel, ok := strings.CutPrefix(k, prefix); ok {
			sp.Lines[rel] = l
		}
	}
	d.lines = outer
	return sp
}

// parsePrefix reads a CIDR, or a single address as a /32 or /128.
func parsePrefix(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR (such as 10.0.0.0/8) or an address", s)
		}
		a = a.Unmap().WithZone("")
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR such as 10.0.0.0/8 or fd00::/8", s)
	}
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("%q has bits set past the prefix length; did you mean %s?", s, p.Masked())
	}
	return p, nil
}

// applyDefaults fills in every value left zero.
func (c *Config) applyDefaults() {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	defDur := func(x *time.Duration, v time.Duration) {
		if *x == 0 {
			*x = v
		}
	}
	def(&c.Listen, DefaultListen)
	def(&c.LogLevel, DefaultLogLevel)
	if p := c.Proxy; p != nil {
		defDur(&p.DialTimeout, DefaultDialTimeout)
		defDur(&p.ResponseHeaderTimeout, DefaultResponseHeaderTimeout)
		defDur(&p.ReadHeaderTimeout, DefaultReadHeaderTimeout)
		defDur(&p.IdleTimeout, DefaultIdleTimeout)
	}
	def(&c.Store.Type, "memory")
	def(&c.Store.OnError, DefaultOnError)
	if c.Store.Type == "redis" {
		defDur(&c.Store.Redis.Timeout, DefaultRedisTimeout)
		def(&c.Store.Redis.KeyPrefix, DefaultRedisKeyPrefix)
	}
	if c.Store.ExpectedInstances == 0 {
		c.Store.ExpectedInstances = 1
	}
	if c.ForwardAuth.DenyStatus == 0 {
		c.ForwardAuth.DenyStatus = DefaultDenyStatus
	}
	if c.Limits.MaxBodyBytes == 0 {
		c.Limits.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.GRPC != nil && c.File != "" {
		dir := filepath.Dir(c.File)
		for i, p := range c.GRPC.Config {
			if p != "" && !filepath.IsAbs(p) {
				c.GRPC.Config[i] = filepath.Join(dir, p)
			}
		}
	}
}

// Validate checks c, which must have its defaults applied (ParseConfig
// does both), and compiles its rules. The error, if any, is ConfigErrors;
// on a Config built in Go rather than read from a file its lines are 0.
func (c *Config) Validate() error { return c.validate(nil) }

// RuleSet compiles c's rules.
func (c *Config) RuleSet() (*rules.Set, error) { return rules.Compile(c.File, c.Rules) }

func (c *Config) validate(lines map[string]int) error {
	var errs rules.ParseErrors
	fail := func(key, format string, args ...any) {
		errs = append(errs, &rules.ParseError{File: c.File, Line: lineOf(lines, key), Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	checkAddr := func(key, addr string) {
		if msg := addrProblem(addr); msg != "" {
			fail(key, "%q: %s", addr, msg)
		}
	}
	between := func(key string, x, lo, hi time.Duration) {
		if x < lo || x > hi {
			fail(key, "%v must be between %v and %v", x, lo, hi)
		}
	}

	checkAddr("listen", c.Listen)
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		fail("log_level", "unknown level %q (want debug, info, warn or error)", c.LogLevel)
	}
	if c.ShutdownTimeout != 0 {
		between("shutdown_timeout", c.ShutdownTimeout, time.Millisecond, 10*time.Minute)
	}

	listeners := map[string]string{c.Listen: "listen"}
	sameAddr := func(key, addr string) {
		if _, port, err := net.SplitHostPort(addr); err == nil && port == "0" {
			return
		}
		if other, dup := listeners[addr]; dup {
			fail(key, "%q is already used by %s", addr, other)
		}
		listeners[addr] = key
	}
	if p := c.Proxy; p != nil {
		if p.Listen == "" {
			fail("proxy.listen", "missing: the proxy needs an address to listen on, such as 127.0.0.1:8000")
		} else {
			checkAddr("proxy.listen", p.Listen)
			sameAddr("proxy.listen", p.Listen)
		}
		if p.Upstream == "" {
			fail("proxy.upstream", "missing: the proxy needs an upstream URL, such as http://127.0.0.1:9000")
		} else if msg := upstreamProblem(p.Upstream); msg != "" {
			fail("proxy.upstream", "%q: %s", p.Upstream, msg)
		}
		between("proxy.dial_timeout", p.DialTimeout, time.Millisecond, time.Hour)
		between("proxy.response_header_timeout", p.ResponseHeaderTimeout, time.Millisecond, time.Hour)
		between("proxy.read_header_timeout", p.ReadHeaderTimeout, time.Millisecond, time.Hour)
		between("proxy.idle_timeout", p.IdleTimeout, time.Millisecond, 24*time.Hour)
	}
	if g := c.GRPC; g != nil {
		if g.Listen == "" {
			fail("grpc.listen", "missing: the gRPC service needs an address to listen on, such as 127.0.0.1:8081")
		} else {
			checkAddr("grpc.listen", g.Listen)
			sameAddr("grpc.listen", g.Listen)
		}
		if len(g.Config) == 0 {
			fail("grpc.config", "missing: list the Envoy descriptor files, such as [ratelimit.yaml]")
		}
		for i, p := range g.Config {
			key := "grpc.config[" + strconv.Itoa(i) + "]"
			if p == "" {
				fail(key, "empty path")
			} else if fi, err := os.Stat(p); err != nil {
				fail(key, "%s: %v", p, errors.Unwrap(err))
			} else if !fi.Mode().IsRegular() {
				fail(key, "%s is not a regular file", p)
			}
		}
	}

	s := &c.Store
	redis := s.Type == "redis"
	switch s.Type {
	case "memory":
		if !redisZero(s.Redis) {
			fail("store.redis", "set, but store.type is memory: add type: redis, or remove the redis block")
		}
	case "redis":
		r := &s.Redis
		if len(r.Addrs) == 0 {
			fail("store.redis.addrs", "missing: the Redis store needs at least one address, such as [127.0.0.1:6379]")
		}
		for i, a := range r.Addrs {
			checkAddr("store.redis.addrs["+strconv.Itoa(i)+"]", a)
		}
		if len(r.Addrs) > 1 && !r.Cluster {
			fail("store.redis.addrs", "%d addresses without cluster: true (one address for a single Redis, several for Redis Cluster)", len(r.Addrs))
		}
		between("store.redis.timeout", r.Timeout, time.Millisecond, time.Minute)
		if r.DB < 0 || r.DB > 1<<20 {
			fail("store.redis.db", "%d is not a database number", r.DB)
		} else if r.DB != 0 && r.Cluster {
			fail("store.redis.db", "Redis Cluster has database 0 only")
		}
		if len(r.KeyPrefix) > 64 {
			fail("store.redis.key_prefix", "longer than 64 bytes")
		}
	default:
		fail("store.type", "unknown store %q (want memory or redis)", s.Type)
	}
	switch s.OnError {
	case "allow", "deny":
	case "local":
		if !redis {
			fail("store.on_error", "local falls back from Redis to memory: it needs store.type: redis")
		}
	default:
		fail("store.on_error", "unknown policy %q (want allow, deny or local)", s.OnError)
	}
	if s.ExpectedInstances < 1 || s.ExpectedInstances > 100_000 {
		fail("store.expected_instances", "%d must be between 1 and 100000", s.ExpectedInstances)
	}
	if s.MaxKeys < 0 {
		fail("store.max_keys", "%d must not be negative", s.MaxKeys)
	}

	for i, p := range c.ClientIP.TrustedProxies {
		if !p.IsValid() {
			fail("client_ip.trusted_proxies["+strconv.Itoa(i)+"]", "invalid prefix")
		}
	}
	if st := c.ForwardAuth.DenyStatus; st < 400 || st > 599 {
		fail("forward_auth.deny_status", "%d is not a 4xx or 5xx status", st)
	}
	if b := c.Limits.MaxBodyBytes; b < 1 || b > 64<<20 {
		fail("limits.max_body_bytes", "%d must be between 1 and %d", b, 64<<20)
	}

	if _, err := c.RuleSet(); err != nil {
		var pe rules.ParseErrors
		if errors.As(err, &pe) {
			errs = append(errs, pe...)
		} else {
			fail("rules", "%v", err)
		}
	}
	for i := range c.Rules {
		sp := &c.Rules[i]
		at := func(k string) (string, int) {
			key := "rules[" + strconv.Itoa(i) + "]." + k
			if l := sp.Lines[k]; l > 0 {
				return key, l
			}
			return key, sp.Line
		}
		need := func(k, what string) {
			key, line := at(k)
			errs = append(errs, &rules.ParseError{File: c.File, Line: line, Key: key, Msg: what + " needs store.type: redis"})
		}
		if sp.Sync > 0 && !redis {
			need("sync", "sync (hybrid counting)")
		}
		if sp.Shards > 0 && !redis {
			need("shards", "shards (splitting a key over Redis keys)")
		}
		if sp.Action == "defer" && !redis {
			need("action", "action: defer (a Redis Stream)")
		}
	}
	return errs.Err()
}

// lineOf finds the line of key, or of its nearest enclosing key.
func lineOf(lines map[string]int, key string) int {
	for key != "" {
		if l, ok := lines[key]; ok {
			return l
		}
		i := strings.LastIndexAny(key, ".[")
		if i < 0 {
			break
		}
		key = key[:i]
	}
	return 0
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

func upstreamProblem(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "not a URL"
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "want an http:// or https:// URL"
	case u.Host == "":
		return "no host"
	case u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
		return "must not have a query or fragment"
	case u.User != nil:
		return "must not carry credentials"
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "port " + strconv.Quote(p) + " is not a number from 1 to 65535"
		}
	}
	return ""
}

func redisZero(r RedisConfig) bool {
	return len(r.Addrs) == 0 && !r.Cluster && r.Timeout == 0 && r.Username == "" &&
		r.Password == "" && r.DB == 0 && !r.TLS && r.KeyPrefix == ""
}
