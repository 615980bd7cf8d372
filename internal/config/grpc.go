package config

import (
	"os"
	"path/filepath"
	"strconv"

	"github.com/sluicehq/sluice/internal/descriptors"
	"github.com/sluicehq/sluice/internal/listener"
)

// GRPCConfig is the Envoy rate limit service (v3) on its own listener.
type GRPCConfig struct {
	Listen string `yaml:"listen"` // required, host:port or unix:/PATH
	// Config lists the Envoy-format descriptor files, or directories of
	// them, resolved against the config file's directory. Config or XDS
	// is required, not both.
	Config []string `yaml:"config"`
	// XDS, if set, takes the descriptors from an xDS management server
	// instead of files.
	XDS *XDSConfig `yaml:"xds"`
	// TLS, if set, serves the gRPC service over TLS (mTLS with ClientCA).
	TLS *TLSConfig `yaml:"tls"`
	// ResponseHeaders adds the rate-limit headers (RateLimit-*,
	// X-RateLimit-*, and Retry-After when over the limit) to every answer
	// with a limit, for Envoy to pass on to the client. Default false.
	ResponseHeaders bool `yaml:"response_headers"`
	// ShadowMode puts the whole service in shadow mode, as the reference
	// service's SHADOW_MODE: every limit is counted and reported, none
	// denies. Default false.
	ShadowMode bool `yaml:"shadow_mode"`
	// QuotaMode puts the whole service in quota mode, as the reference
	// service's QUOTA_MODE: every descriptor is decided as one with
	// quota_mode, a request being over the limit only when all its
	// descriptors are. Default false.
	QuotaMode bool `yaml:"quota_mode"`
	// OnError is what the service answers when the store cannot decide:
	// "" (default) answers as store.on_error says (allow: OK, deny:
	// OVER_LIMIT); "unavailable" answers gRPC UNAVAILABLE (503 on /json),
	// so that Envoy's failure_mode_deny decides.
	OnError string `yaml:"on_error"`
	// MergeDomains lets a domain appear in several descriptor files, as
	// the reference service's MERGE_DOMAIN_CONFIG: their top-level
	// descriptors are put together. Default false: a domain lives in one
	// file.
	MergeDomains bool `yaml:"merge_domains"`
	// MaxConnections caps the client connections held at once, as in api:
	// and proxy:. Default listener.DefaultMaxConnections (10000).
	MaxConnections int `yaml:"max_connections"`
}

// GRPCOnErrorUnavailable is grpc.on_error: unavailable.
const GRPCOnErrorUnavailable = "unavailable"

func (g *GRPCConfig) defaults(file string) {
	setDefault(&g.MaxConnections, listener.DefaultMaxConnections)
	for i := range g.Config {
		resolvePath(file, &g.Config[i])
	}
	if g.TLS != nil {
		g.TLS.defaults(file)
	}
	if g.XDS != nil {
		g.XDS.defaults(file)
	}
}

func (g *GRPCConfig) check(ck *checker) {
	if g.Listen == "" {
		ck.fail("grpc.listen", "missing: the gRPC service needs an address to listen on, such as 127.0.0.1:8081")
	} else {
		ck.listen("grpc.listen", g.Listen, true)
	}
	switch {
	case g.XDS != nil && g.Config != nil:
		ck.fail("grpc.xds", "grpc.config and grpc.xds exclude each other: the descriptors come from files or from an xDS server, not both (the reference service's CONFIG_TYPE is FILE or GRPC_XDS_SOTW)")
	case g.XDS != nil:
		g.XDS.check(ck)
	case len(g.Config) == 0:
		ck.fail("grpc.config", "missing: list the Envoy descriptor files, such as [ratelimit.yaml], or give grpc.xds")
	}
	var read []readBy
	for i, p := range g.Config {
		key := "grpc.config[" + strconv.Itoa(i) + "]"
		n := len(ck.errs)
		ck.path(key, p, true)
		if len(ck.errs) == n {
			read = ck.readOnce(key, p, read)
		}
	}
	if g.TLS != nil {
		g.TLS.check(ck, "grpc.tls")
	}
	if n := g.MaxConnections; n < 1 || n > MaxMaxConnections {
		ck.fail("grpc.max_connections", "%d must be between 1 and %d", n, MaxMaxConnections)
	}
	if g.OnError != "" && g.OnError != GRPCOnErrorUnavailable {
		ck.fail("grpc.on_error", "%q: want unavailable, or leave it out to answer as store.on_error says", g.OnError)
	}
}

// readBy is a descriptor file, or a listed directory, and the
// grpc.config entry that reads it.
type readBy struct {
	fi   os.FileInfo
	key  string // grpc.config[i]
	path string // the entry's path, when a directory that holds fi
	name string // the file's path in that directory
}

// readOnce checks that the grpc.config entry key, path p (a file, or a
// directory whose *.yaml and *.yml files are read), reads no file that an
// entry before it, in read, reads already: listed twice, the file's domain
// would be "already configured" in itself, and the likely cause, a typo
// for another file, would leave that file's domain unserved. It returns
// read with p's files added.
func (ck *checker) readOnce(key, p string, read []readBy) []readBy {
	fi, err := os.Stat(p)
	if err != nil {
		return read
	}
	seen := func(fi os.FileInfo) *readBy {
		for i := range read {
			if os.SameFile(read[i].fi, fi) {
				return &read[i]
			}
		}
		return nil
	}
	if r := seen(fi); r != nil {
		ck.fail(key, "%s is read already, by %s: list each descriptor file once", p, r.by())
		return read
	}
	if !fi.IsDir() {
		return append(read, readBy{fi: fi, key: key})
	}
	read = append(read, readBy{fi: fi, key: key, path: p})
	ents, err := os.ReadDir(p)
	if err != nil {
		return read
	}
	for _, e := range ents {
		full := filepath.Join(p, e.Name())
		fi, err := os.Stat(full)
		if !descriptors.Listed(e.Name()) || err != nil || fi.IsDir() {
			continue
		}
		if r := seen(fi); r != nil && r.key == key {
			ck.fail(key, "%s holds %s and %s, one file under two names: its domain would be read twice; list each descriptor file once", p, r.name, full)
			return read
		} else if r != nil {
			ck.fail(key, "%s reads %s, which %s reads already; list each descriptor file once", p, full, r.by())
			return read
		}
		read = append(read, readBy{fi: fi, key: key, path: p, name: full})
	}
	return read
}

// by names the entry that reads r: its key, and the directory.
func (r *readBy) by() string {
	if r.path != "" {
		return r.key + " (" + r.path + ")"
	}
	return r.key
}
