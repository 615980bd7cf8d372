package daemon

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/sluicehq/sluice/internal/config"
)

// What a reload cannot change: the keys bound once, at startup, and the
// error that names them.

// restartOnly returns the dotted names of the keys whose values differ
// between old and new and that cannot change without a restart: listeners
// and the store are bound once, at startup.
func restartOnly(old, new *config.Config) []string {
	var keys []string
	if old.Listen != new.Listen {
		keys = append(keys, "listen")
	}
	switch {
	case (old.Proxy == nil) != (new.Proxy == nil):
		keys = append(keys, "proxy")
	case old.Proxy != nil:
		if old.Proxy.Listen != new.Proxy.Listen {
			keys = append(keys, "proxy.listen")
		}
		keys = append(keys, listenerChanges("proxy", &old.Proxy.Listener, &new.Proxy.Listener)...)
	}
	keys = append(keys, listenerChanges("api", &old.API.Listener, &new.API.Listener)...)
	if old.API.TokenFile != new.API.TokenFile {
		keys = append(keys, "api.token_file")
	}
	switch {
	case (old.GRPC == nil) != (new.GRPC == nil):
		keys = append(keys, "grpc")
	case old.GRPC != nil:
		// The listener is bound and the descriptor files are watched from
		// startup; response_headers and on_error apply on reload.
		if old.GRPC.Listen != new.GRPC.Listen {
			keys = append(keys, "grpc.listen")
		}
		if !reflect.DeepEqual(old.GRPC.Config, new.GRPC.Config) {
			keys = append(keys, "grpc.config")
		}
		if !reflect.DeepEqual(old.GRPC.XDS, new.GRPC.XDS) {
			keys = append(keys, "grpc.xds") // the subscription is made at startup
		}
		if !reflect.DeepEqual(old.GRPC.TLS, new.GRPC.TLS) {
			keys = append(keys, "grpc.tls")
		}
		if old.GRPC.MaxConnections != new.GRPC.MaxConnections {
			keys = append(keys, "grpc.max_connections")
		}
	}
	keys = append(keys, changedKeys("store", old.Store, new.Store)...)
	// The queue's workers start with the daemon.
	keys = append(keys, changedKeys("defer", old.Defer, new.Defer)...)
	if old.LogLevel != new.LogLevel {
		keys = append(keys, "log_level")
	}
	return keys
}

// changedKeys returns the dotted names (block.key.key, by their YAML
// names) of the settings that differ between a and b, two values of one
// config struct, so that a refusal names the keys that changed rather than
// the block; the block's own name if they differ otherwise.
func changedKeys(block string, a, b any) []string {
	return diffKeys(block, reflect.ValueOf(a), reflect.ValueOf(b), nil)
}

// diffKeys appends to keys the name of each field of a and b, values of
// one type, that differs, going down into structs; a struct's own name
// when it differs in fields without a YAML name only.
func diffKeys(name string, a, b reflect.Value, keys []string) []string {
	if a.Kind() != reflect.Struct {
		if !reflect.DeepEqual(a.Interface(), b.Interface()) {
			keys = append(keys, name)
		}
		return keys
	}
	t, before := a.Type(), len(keys)
	for i := range t.NumField() {
		f := t.Field(i)
		tag, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case !f.IsExported() || tag == "-":
		case tag == "" && strings.Contains(opts, "inline"):
			keys = diffKeys(name, a.Field(i), b.Field(i), keys)
		case tag != "":
			keys = diffKeys(name+"."+tag, a.Field(i), b.Field(i), keys)
		}
	}
	if len(keys) == before && !reflect.DeepEqual(a.Interface(), b.Interface()) {
		// In a field without a YAML name (store.redis.tls: true sets
		// one): the struct's own key names it.
		keys = append(keys, name)
	}
	return keys
}

// listenerChanges returns the keys of block (api, proxy) whose listener
// settings differ: they are bound into the http.Server at startup.
func listenerChanges(block string, old, new *config.Listener) []string {
	var keys []string
	add := func(changed bool, key string) {
		if changed {
			keys = append(keys, block+"."+key)
		}
	}
	add(old.ReadHeaderTimeout != new.ReadHeaderTimeout, "read_header_timeout")
	add(old.IdleTimeout != new.IdleTimeout, "idle_timeout")
	add(old.BodyReadTimeout != new.BodyReadTimeout, "body_read_timeout")
	add(old.SendTimeout != new.SendTimeout, "send_timeout")
	add(old.MaxConnections != new.MaxConnections, "max_connections")
	add(!reflect.DeepEqual(old.TLS, new.TLS), "tls")
	return keys
}

// errRestartOnly is wrapped by the error of a reload that changes keys
// needing a restart.
var errRestartOnly = errors.New("needs a restart")

// restartError names the keys and, for those written in cfg (the config
// refused), their lines.
func restartError(file string, keys []string, cfg *config.Config) error {
	named := make([]string, len(keys))
	for i, k := range keys {
		named[i] = k
		if cfg.Has(k) {
			named[i] += fmt.Sprintf(" (line %d)", cfg.Line(k))
		}
	}
	return fmt.Errorf("daemon: reload %s: %s changed: %w (the running config stays; restart sluice to apply it)",
		file, strings.Join(named, ", "), errRestartOnly)
}
